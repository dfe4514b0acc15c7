"""`make test-changed`: a contributor's quick loop. The fast tests (not `slow`) of what
changed since main: every test file that changed, and every test file that imports a
changed module of the kit (scripts/, jobs/raykit/, a job's own modules), found by reading
the tests' imports. Changed means: in a commit since main's last one (or since HEAD on
main itself), staged, unstaged, or new and not ignored.

    python -m tests.harness.changed            # runs pytest on them, on two processes
    python -m tests.harness.changed --list     # only lists them
"""

import ast
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True).stdout


def base() -> str:
    """The commit the changes are counted from: where this branch left main (HEAD on main)."""
    try:
        return git("merge-base", "HEAD", "main").strip()
    except subprocess.CalledProcessError:  # no branch named main: this commit
        return "HEAD"


def changed_files() -> set[str]:
    since = git("diff", "--name-only", base()).split()
    untracked = git("ls-files", "--others", "--exclude-standard").split()
    return {path for path in since + untracked if path.endswith(".py") and (REPO / path).exists()}


def module_names(path: str) -> set[str]:
    """The names a test could import `path` by: scripts.x.y, and for jobs/ both jobs.raykit.x
    and raykit.x (jobs/ is on a job's path), or a job's own module by its file name."""
    dotted = path[:-3].replace("/", ".").removesuffix(".__init__")
    names = {dotted}
    if dotted.startswith("jobs."):
        parts = dotted.split(".")
        names.add(".".join(parts[1:]))        # raykit.x, vit_synthetic.pipeline
        if parts[1] != "raykit" and len(parts) > 2:
            names.add(".".join(parts[2:]))    # pipeline, main: a job's folder on sys.path
    return names


def imports_of(test: Path) -> set[str]:
    """Every module a test file imports (function-level imports too), with each parent
    package and, for `from X import Y`, X.Y."""
    try:
        tree = ast.parse(test.read_text())
    except SyntaxError:
        return set()
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def selected(changed: set[str]) -> list[str]:
    tests = sorted(TESTS.rglob("test_*.py"))
    chosen = {str(t.relative_to(REPO)) for t in tests if str(t.relative_to(REPO)) in changed}
    wanted = set().union(*(module_names(p) for p in changed if not p.startswith("tests/")))
    for test in tests:
        if imports_of(test) & wanted:
            chosen.add(str(test.relative_to(REPO)))
    if any(p.startswith("tests/") and not Path(p).name.startswith("test_") for p in changed):
        # conftest, stand-ins, helpers: every test may use them
        chosen = {str(t.relative_to(REPO)) for t in tests}
    return sorted(chosen)


def main(argv: list[str]) -> int:
    files = selected(changed_files())
    if not files:
        print("test-changed: nothing changed since main that a test covers")
        return 0
    print(f"test-changed: {len(files)} test file(s): {' '.join(files)}", flush=True)
    if "--list" in argv:
        return 0
    return subprocess.call([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2",
                            "-q", "-m", "not slow", *files], cwd=REPO)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
