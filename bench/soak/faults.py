"""The faults the soak injects, one at a time, each undone before the next.

Each is a function of the soak (`s`, see __main__.py) and a random
generator drawn from the seed; it returns a short detail for the log, or
raises Skip where this machine cannot inject it. KINDS lists them.
"""

import os
import socket
import ssl
import subprocess
import threading
import time

from . import client


class Skip(Exception):
    pass


# --- reloads ----------------------------------------------------------------

def reload_valid(s, rng):
    """A valid configuration that rebuilds the storage collector (its
    probe's interval changes)."""
    s.node.probe_interval = "2s" if s.node.probe_interval == "1s" else "1s"
    s.node.write_config()
    s.node.hup()
    s.expect_reload(True)
    return f"probe interval {s.node.probe_interval}"


def reload_half_written(s, rng):
    """The configuration cut short inside a quoted value, written in place
    as an editor without an atomic save leaves it: refused, the running
    configuration stays."""
    text = s.node.config_text()
    quotes = [i for i, c in enumerate(text) if c == '"']
    # Inside a value that is not empty, before its closing quote: the file
    # cut just after the "" of an empty value is a shorter valid one (seed
    # 17154209: `pod_resources_socket = ""`, taken as a reload).
    values = [(quotes[k], quotes[k + 1]) for k in range(0, len(quotes), 2)
              if quotes[k + 1] > quotes[k] + 1]
    start, end = values[rng.randrange(len(values))]
    cut = start + 1 + rng.randrange(0, min(3, end - start - 1))
    s.node.write_config_in_place(text[:cut])
    s.node.hup()
    s.expect_reload(False)
    s.node.write_config()  # the editor finishes the file: no reload asked for
    return f"cut at byte {cut} of {len(text)}"


INVALID = [
    ("a negative interval", 'interval = "100ms"', 'interval = "-5s"', 1),
    ("an unknown key", "[collectors.pcie]\n", "[collectors.pcie]\nintervall = \"1s\"\n", 1),
    ("an unknown collector", "[collectors.nic]\n", "[collectors.nics]\ninterval = \"1s\"\n[collectors.nic]\n", 1),
    ("a string for a duration", 'timeout = "1s"', "timeout = 1", 1),
]


def reload_invalid(s, rng):
    """A well-formed file that the daemon must refuse."""
    what, old, new, count = INVALID[rng.randrange(len(INVALID))]
    text = s.node.config_text()
    assert old in text, old
    s.node.write_config(text.replace(old, new, count))
    s.node.hup()
    s.expect_reload(False)
    s.node.write_config()
    return what


# --- the process ------------------------------------------------------------

def kill9(s, rng):
    """kill -9, then a restart as systemd's Restart=on-failure makes it,
    with the same configuration and state file."""
    time.sleep(rng.uniform(0, 1))  # anywhere in the kernel log's save period
    took = s.kill_and_restart()
    return f"ready {took:.2f} s after the restart"


def state_disk_full(s, rng):
    """The kernel collector's state file on a small tmpfs, filled for a
    while (longer than a save period), records logged meanwhile; at times
    a kill -9 while it is full. Root only (mount)."""
    if not s.state_tmpfs:
        raise Skip("not root: the state file is not on a tmpfs of its own")
    filler = os.path.join(s.node.state_dir, "filler")
    with open(filler, "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError:
            pass
    detail = "full for 12 s"
    try:
        for _ in range(6):
            s.kmsg.append(rng.randrange(5, 50))
            time.sleep(2)
        if rng.random() < 0.5:
            s.count_fault("kill9")
            took = s.kill_and_restart()
            detail += f", kill -9 while full (ready in {took:.2f} s)"
            time.sleep(2)
    finally:
        os.unlink(filler)
    time.sleep(11)  # a save period: the counts reach the file again
    return detail


def fd_limit(s, rng):
    """RLIMIT_NOFILE lowered to a few descriptors above those open, for
    10 s; idle connections take what is left, so that new connections and
    the collectors' reads meet EMFILE; then restored."""
    stats = s.node.stats()
    if stats is None:
        raise Skip("no daemon")
    pid = s.node.pid
    old = subprocess.run(["prlimit", "--pid", str(pid), "--nofile", "--raw", "--noheadings",
                          "--output", "SOFT,HARD"], capture_output=True, text=True)
    if old.returncode != 0:
        raise Skip("prlimit: " + old.stderr.strip())
    soft, hard = old.stdout.split()
    low = stats[1] + 8
    subprocess.run(["prlimit", "--pid", str(pid), f"--nofile={low}:{hard}"], check=True)
    held = []
    try:
        # Idle connections (each a descriptor in the daemon, once accepted)
        # from addresses of their own, then new ones coming and going.
        held = _sockets(s, ["127.0.2.2", "127.0.2.3"], 6)
        c = client.Client(s.node, "127.0.2.1", 2)
        end = time.monotonic() + 10
        answered = failed = 0
        while time.monotonic() < end:
            try:
                c.get("/metrics")
                answered += 1
            except Exception:
                failed += 1
            c.close()
            time.sleep(0.2)
    finally:
        if s.node.pid == pid:
            subprocess.run(["prlimit", "--pid", str(pid), f"--nofile={soft}:{hard}"])
        for sock in held:
            sock.close()
    return (f"limit {low} (was {soft}), {len(held)} idle connections: {answered} new "
            f"connections answered, {failed} not")


# --- hostile HTTP clients ---------------------------------------------------

def _sockets(s, sources, per_source):
    out = []
    for src in sources:
        for _ in range(per_source):
            try:
                sock = socket.create_connection(("127.0.0.1", s.node.port), timeout=2,
                                                source_address=(src, 0))
                out.append(sock)
            except OSError:
                pass
    return out


def _request(s, path="/metrics", password=None):
    auth = ""
    if s.node.tls:
        import base64
        pw = s.node.password if password is None else password
        auth = "Authorization: Basic " + base64.b64encode(f"{s.node.user}:{pw}".encode()).decode() + "\r\n"
    return f"GET {path} HTTP/1.1\r\nHost: soak\r\n{auth}\r\n".encode()


def _wrap(s, sock):
    if not s.node.tls:
        return sock
    ctx = ssl.create_default_context(cafile=s.node.cert)
    sock.settimeout(5)
    return ctx.wrap_socket(sock, server_hostname="127.0.0.1")


def slow_readers(s, rng):
    """Connections that ask for many responses and never read them: the
    server must drop them after write_timeout (5 s)."""
    socks = []
    for sock in _sockets(s, ["127.0.3.1", "127.0.3.2"], 4):
        try:
            t = _wrap(s, sock)
            t.setblocking(False)
            try:
                for _ in range(20):
                    t.send(_request(s) * 4)
            except (BlockingIOError, ssl.SSLWantWriteError, OSError):
                pass
            socks.append(t)
        except OSError:
            sock.close()
    time.sleep(8)
    for t in socks:
        t.close()
    return f"{len(socks)} connections"


def pipeline_flood(s, rng):
    """One connection sending 500 requests back to back, reading the
    answers as they come."""
    socks = _sockets(s, ["127.0.3.3"], 1)
    if not socks:
        return "no connection"
    t = _wrap(s, socks[0])
    t.settimeout(5)
    n = 500
    sender = threading.Thread(target=lambda: _sendall_quiet(t, _request(s, "/metrics?collect[]=pcie") * n))
    sender.start()
    got = 0
    buf = b""
    try:
        while got < n:
            data = t.recv(1 << 16)
            if not data:
                break
            buf += data
            got += buf.count(b"HTTP/1.1 ")
            buf = buf[-16:]
    except OSError:
        pass
    t.close()
    sender.join()
    return f"{n} requests, {got} answers read"


def _sendall_quiet(t, data):
    try:
        t.sendall(data)
    except OSError:
        pass


def stalled_connections(s, rng):
    """Connections that send half a request, or half a TLS handshake, and
    then nothing: dropped after read_timeout (10 s)."""
    socks = _sockets(s, ["127.0.3.4", "127.0.3.5"], 6)
    for i, sock in enumerate(socks):
        try:
            if s.node.tls and i % 2 == 0:
                # The first bytes of a ClientHello: a record header, then
                # the start of the handshake message.
                sock.send(bytes.fromhex("160301020001000200030366"))
            else:
                sock.send(b"GET /metr" if not s.node.tls else b"")
        except OSError:
            pass
    time.sleep(12)
    for sock in socks:
        sock.close()
    return f"{len(socks)} connections" + (", half of them in a TLS handshake" if s.node.tls else "")


def wrong_passwords(s, rng):
    """Eight addresses sending wrong passwords for 6 s, one request after
    another; the scraper, whose password is remembered, must be served."""
    if not s.node.tls:
        raise Skip("no basic authentication (no openssl or bcrypt)")
    stop = time.monotonic() + 6
    counts = [0]

    def attack(src):
        while time.monotonic() < stop:
            socks = _sockets(s, [src], 1)
            if not socks:
                time.sleep(0.1)
                continue
            try:
                t = _wrap(s, socks[0])
                t.settimeout(3)
                while time.monotonic() < stop:
                    t.sendall(_request(s, password="guess"))
                    data = t.recv(1 << 16)
                    if not data or b" 401 " not in data:
                        break
                    counts[0] += 1
                t.close()
            except OSError:
                time.sleep(0.05)

    threads = [threading.Thread(target=attack, args=(f"127.0.4.{i + 1}",)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return f"{counts[0]} wrong passwords answered 401"


# --- the node's inputs ------------------------------------------------------

def kmsg_storm(s, rng):
    """A burst of kernel log records (on top of the steady trickle)."""
    n = s.kmsg.append(rng.randrange(200, 1000))
    return f"{n} records" if n else "none: the run's record budget is spent"


def textfile_churn(s, rng):
    """Files of the textfile directory added, rewritten, half-written and
    removed for 6 s."""
    d = s.node.textfile_dir
    end = time.monotonic() + 6
    ops = 0
    while time.monotonic() < end:
        i = rng.randrange(4)
        path = os.path.join(d, f"soak_churn_{i}.prom")
        op = rng.randrange(3)
        if op == 0:
            body = (f"# TYPE soak_churn_value gauge\nsoak_churn_value{{file=\"{i}\"}} {rng.random()}\n"
                    f"# TYPE soak_churn_writes counter\nsoak_churn_writes_total{{file=\"{i}\"}} {ops}\n")
            with open(path + ".tmp", "w") as f:
                f.write(body)
            os.replace(path + ".tmp", path)
        elif op == 1:
            with open(path, "w") as f:  # not atomic: may be read half-written
                f.write("# TYPE soak_churn_value gauge\nsoak_churn_value{file=\"")
                f.flush()
                time.sleep(0.15)
                f.write(f"{i}\"}} 1\n")
        else:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
        ops += 1
        time.sleep(rng.uniform(0.02, 0.3))
    for i in range(4):
        try:
            os.unlink(os.path.join(d, f"soak_churn_{i}.prom"))
        except FileNotFoundError:
            pass
    return f"{ops} changes"


KINDS = {
    "reload_valid": reload_valid,
    "reload_half_written": reload_half_written,
    "reload_invalid": reload_invalid,
    "kill9": kill9,
    "state_disk_full": state_disk_full,
    "fd_limit": fd_limit,
    "slow_readers": slow_readers,
    "pipeline_flood": pipeline_flood,
    "stalled_connections": stalled_connections,
    "wrong_passwords": wrong_passwords,
    "kmsg_storm": kmsg_storm,
    "textfile_churn": textfile_churn,
}

# Families whose series come and go because a fault changes their source
# on purpose: not held to the no-vanishing rule.
CHURNED_PREFIXES = ("soak_churn_", "nodewatch_textfile_file_")
