"""A stand-in for EC2's instance metadata service (IMDSv2) on 127.0.0.1, for the spot tests:
a session token from PUT /latest/api/token, required on every GET (401 without); the
instance's local-ipv4 and instance-life-cycle; and spot/instance-action, 404 until a test
schedules a notice."""

import datetime
import http.server
import json
import secrets
import threading


class Imds:
    """`with Imds(local_ipv4) as imds:` serves at imds.url; imds.schedule(...) posts a notice."""

    def __init__(self, local_ipv4: str = "10.0.0.5", life_cycle: str = "spot"):
        self.local_ipv4, self.life_cycle = local_ipv4, life_cycle
        self.token = secrets.token_hex(16)
        self.notice = None
        self.gets = []  # (path, whether it carried the token)
        imds = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_PUT(self):
                asked = self.headers.get("X-aws-ec2-metadata-token-ttl-seconds", "")
                if self.path != "/latest/api/token" or not asked.isdigit():
                    return self.reply(400, "")
                self.reply(200, imds.token)

            def do_GET(self):
                authorized = self.headers.get("X-aws-ec2-metadata-token") == imds.token
                imds.gets.append((self.path, authorized))
                if not authorized:
                    return self.reply(401, "")
                if self.path == "/latest/meta-data/local-ipv4":
                    return self.reply(200, imds.local_ipv4)
                if self.path == "/latest/meta-data/instance-life-cycle":
                    return self.reply(200, imds.life_cycle)
                if self.path == "/latest/meta-data/spot/instance-action" and imds.notice:
                    return self.reply(200, json.dumps(imds.notice))
                self.reply(404, "")

            def reply(self, code: int, body: str):
                self.send_response(code)
                self.end_headers()
                self.wfile.write(body.encode())

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def schedule(self, action: str = "terminate", in_s: float = 120) -> None:
        """A notice as AWS posts it: the action, and when (UTC; two minutes ahead)."""
        when = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=in_s)
        self.notice = {"action": action, "time": when.strftime("%Y-%m-%dT%H:%M:%SZ")}

    def __enter__(self):
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
