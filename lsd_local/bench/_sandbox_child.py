"""Run an untrusted Python program under limits: `python -I -B _sandbox_child.py PROGRAM`.

Started by humaneval.run_sandboxed in a fresh temporary folder (the working directory, also
its HOME and TMPDIR). Before the program runs: OS isolation where the machine allows it (new
user and network namespaces: no network at all, not even loopback; the file system is the
user's, readable as the user may), resource limits (address space, CPU seconds, file size,
open files) and an audit hook (PEP 578) that refuses, for the rest of the process, writing or
deleting anything outside the working directory, starting processes, sockets and ctypes.
The audit hook alone is not a sandbox (CPython says so); the network namespace is the part
the kernel enforces. Exit status 0 means the program ran to its end; 3 means the sandbox
refused an operation.
`python -I -B _sandbox_child.py --probe` prints what isolation this machine gives and exits.
"""

import os
import resource
import sys

WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
PATH_EVENTS = {"os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.chmod", "os.chown",
               "os.symlink", "os.link", "os.truncate", "os.utime", "shutil.rmtree",
               "shutil.copyfile", "shutil.move", "os.chflags", "os.setxattr",
               "os.removexattr"}
BLOCKED_PREFIXES = ("subprocess.", "os.exec", "os.posix_spawn", "os.spawn", "os.fork",
                    "os.system", "os.kill", "os.killpg", "os.startfile", "socket.",
                    "ctypes.", "pty.", "os.setuid", "os.setgid", "resource.setrlimit",
                    "sys.remote_exec", "webbrowser.")
SANDBOX_EXIT = 3


class SandboxViolation(BaseException):
    """BaseException so that a bare `except Exception` in the program cannot swallow it."""


CLONE_NEWNET = 0x40000000
CLONE_NEWUSER = 0x10000000


def isolate() -> str:
    """Enter new network (and user) namespaces; what was done, or why not ("none: ...")."""
    import ctypes
    import errno

    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError as exc:
        return f"none: no C library to call unshare ({exc})"
    reasons = []
    for flags, what in ((CLONE_NEWUSER | CLONE_NEWNET, "user and network namespaces"),
                        (CLONE_NEWNET, "a network namespace")):
        if libc.unshare(flags) == 0:
            return what
        code = ctypes.get_errno()
        reasons.append(f"{what}: {errno.errorcode.get(code, code)}")
    return "none: " + "; ".join(reasons)


def set_limits(cpu_seconds: int, memory_bytes: int) -> None:
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds))
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def inside(root: str, path) -> bool:
    if isinstance(path, int):  # a file descriptor the program already holds
        return True
    full = os.path.realpath(os.fsdecode(path))
    return full == root or full.startswith(root + os.sep)


def make_hook(root: str):
    def hook(event: str, args: tuple) -> None:
        if event == "open":
            path, mode, flags = args
            writes = (mode is not None and any(c in str(mode) for c in "wax+")) or (
                mode is None and isinstance(flags, int) and flags & WRITE_FLAGS)
            if writes and path is not None and not inside(root, path):
                raise SandboxViolation(f"sandbox: refused to write {path}")
        elif event in PATH_EVENTS:
            for path in args[:2]:
                if isinstance(path, (str, bytes, os.PathLike)) and not inside(root, path):
                    raise SandboxViolation(f"sandbox: refused {event} on {path}")
        elif event.startswith(BLOCKED_PREFIXES):
            raise SandboxViolation(f"sandbox: refused {event}")
    return hook


def main() -> int:
    if sys.argv[1:] == ["--probe"]:
        print(isolate())
        return 0
    program_path, cpu_seconds, memory_mb = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    with open(program_path, encoding="utf-8") as f:
        source = f.read()
    isolation = isolate()
    if isolation.startswith("none") and os.environ.get("LSD_SANDBOX_REQUIRE") == "1":
        print(f"sandbox: no OS isolation ({isolation})", file=sys.stderr)
        return SANDBOX_EXIT
    set_limits(cpu_seconds, memory_mb << 20)
    sys.addaudithook(make_hook(os.path.realpath(os.getcwd())))
    try:
        exec(compile(source, program_path, "exec"), {"__name__": "__main__"})
    except SandboxViolation as exc:
        print(exc, file=sys.stderr)
        return SANDBOX_EXIT
    return 0


if __name__ == "__main__":
    sys.exit(main())
