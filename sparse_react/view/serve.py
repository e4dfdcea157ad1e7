"""Where the view listens: loopback unless the user allows more, the names it then answers to, and
the token a bind beyond loopback requires (as Jupyter does)."""

from __future__ import annotations

import ipaddress
import secrets
import socket
from dataclasses import dataclass
from typing import Sequence

from sparse_react.errors import UserError
from sparse_react.view.app import LOOPBACK_NAMES


def is_loopback(host: str) -> bool:
    if host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def machine_names(host: str) -> list[str]:
    """The names a bind on `host` answers to: the address itself, this machine's names and, for a
    wildcard address, every address those names resolve to."""
    names = [host.strip("[]"), socket.gethostname(), socket.getfqdn(), *LOOPBACK_NAMES]
    try:
        names += [info[4][0] for info in socket.getaddrinfo(socket.gethostname(), None)]
    except OSError:
        pass
    return list(dict.fromkeys(n.lower() for n in names if n))


@dataclass(frozen=True)
class Listener:
    """A bound socket (bound before anything is printed, so a port in use fails first), the URL to
    open, the Host names to answer to, and the token when the bind reaches beyond loopback."""

    socket: socket.socket
    url: str
    names: tuple[str, ...]
    token: str | None

    @classmethod
    def open(cls, host: str, port: int, allow_remote: bool = False, extra_names: Sequence[str] = ()) -> "Listener":
        address = host.strip("[]")
        remote = not is_loopback(address)
        if remote and not allow_remote:
            raise UserError(f"--host {host} listens beyond this machine, where anyone who can reach it sees these "
                            "runs: add --allow-remote to do so (steering and reading then need the token it prints)")
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((address, port))
        except OSError as exc:
            sock.close()
            raise UserError(f"cannot listen on {host} port {port}: {exc.strerror or exc}") from None
        sock.listen(128)
        sock.set_inheritable(True)
        bound = sock.getsockname()[1]
        token = secrets.token_urlsafe(24) if remote else None
        shown = f"[{address}]" if ":" in address else address
        url = f"http://{shown}:{bound}/" + (f"?token={token}" if token else "")
        names = (machine_names(address) if remote else list(LOOPBACK_NAMES)) + [n.lower() for n in extra_names]
        return cls(sock, url, tuple(dict.fromkeys(names)), token)
