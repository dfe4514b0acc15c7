"""No test reaches beyond this machine: in-process sockets may connect only to loopback or
to 0.0.0.0 (which, as a destination, is this host). Installed by conftest.py for the kit's
tests and by adaptdl_shipped_plugin.py for adaptdl's own."""

import ipaddress
import socket

_connect = socket.socket.connect


def _local_only_connect(sock, address):
    if sock.family in (socket.AF_INET, socket.AF_INET6):
        host = address[0]
        try:
            ip = ipaddress.ip_address(host)
        except ValueError:
            ip = ipaddress.ip_address(socket.gethostbyname(host))
        if not (ip.is_loopback or ip.is_unspecified):
            raise ConnectionRefusedError(f"test tried to reach non-loopback {address}")
    return _connect(sock, address)


def install() -> None:
    socket.socket.connect = _local_only_connect
