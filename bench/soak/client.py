"""Scraping the daemon: keep-alive connections (TLS and basic authentication
when the node has them) and a parser of the exposition text."""

import base64
import http.client
import ssl
import time


class Client:
    """One keep-alive connection from `source` (a loopback address, so that
    each kind of client has its own per-address connection slots)."""

    def __init__(self, node, source, timeout):
        self.node, self.source, self.timeout = node, source, timeout
        self.conn = None
        self.auth = {}
        if node.tls:
            token = base64.b64encode(f"{node.user}:{node.password}".encode()).decode()
            self.auth = {"Authorization": "Basic " + token}
            self.ctx = ssl.create_default_context(cafile=node.cert)

    def _connect(self, timeout):
        if self.node.tls:
            return http.client.HTTPSConnection("127.0.0.1", self.node.port, timeout=timeout,
                                               source_address=(self.source, 0), context=self.ctx)
        return http.client.HTTPConnection("127.0.0.1", self.node.port, timeout=timeout,
                                          source_address=(self.source, 0))

    def get(self, path, headers=None, deadline=None):
        """(status, body) of one GET; a keep-alive connection the server
        closed is replaced once. Raises OSError/HTTPException when no answer
        came within `deadline` (monotonic) or the timeout."""
        h = dict(self.auth)
        h.update(headers or {})
        for attempt in range(2):
            left = self.timeout if deadline is None else deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no answer in time")
            try:
                if self.conn is None:
                    self.conn = self._connect(left)
                else:
                    self.conn.timeout = left
                    if self.conn.sock is not None:
                        self.conn.sock.settimeout(left)
                self.conn.request("GET", path, headers=h)
                r = self.conn.getresponse()
                body = r.read()
                if r.getheader("Connection", "").lower() == "close":
                    self.close()
                return r.status, body
            except (OSError, http.client.HTTPException):
                self.close()
                if attempt == 1:
                    raise

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def parse(text):
    """({series: value}, {family: type}) of an exposition text. A series is
    its name with its labels as written ('name{a="b"}')."""
    series, types = {}, {}
    for line in text.splitlines():
        if not line:
            continue
        if line[0] == "#":
            parts = line.split(None, 3)
            if len(parts) >= 4 and parts[1] == "TYPE":
                types[parts[2]] = parts[3]
            continue
        if "{" in line:
            end = line.rindex("}") + 1
            key, rest = line[:end], line[end:].split()
        else:
            key, *rest = line.split()
        if rest:
            try:
                series[key] = float(rest[0])
            except ValueError:
                pass
    return series, types


def name_of(series):
    i = series.find("{")
    return series if i < 0 else series[:i]


def label(series, name):
    key = f'{name}="'
    i = series.find(key)
    if i < 0:
        return None
    i += len(key)
    return series[i:series.index('"', i)]


def family_of(name, types):
    """The declared family a sample belongs to (a counter's _total, a
    histogram's _bucket/_sum/_count)."""
    if name in types:
        return name
    for suffix in ("_total", "_bucket", "_sum", "_count", "_created", "_info"):
        if name.endswith(suffix) and name[: -len(suffix)] in types:
            return name[: -len(suffix)]
    return name
