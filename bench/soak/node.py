"""The daemon under soak: its configuration, its process, its web config.

The daemon is started the way systemd starts it and restarted the same
way after a kill -9: the same arguments, configuration and state file, on
the same port (chosen once, so that the clients keep their address).
"""

import os
import shutil
import signal
import socket
import subprocess
import threading
import warnings

# Collectors run at this interval, far more often than on a node.
INTERVAL = "100ms"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Node:
    def __init__(self, binary, scratch, fixtures, fake_nvml, tls, log):
        self.binary = binary
        self.scratch = scratch
        self.fixtures = fixtures
        self.fake_nvml = fake_nvml
        self.log = log
        self.config = os.path.join(scratch, "nodewatch.toml")
        self.textfile_dir = os.path.join(scratch, "node", "textfile")
        self.kmsg = os.path.join(scratch, "kmsg")
        self.state_dir = os.path.join(scratch, "state")
        self.state_file = os.path.join(self.state_dir, "kernel-log.state")
        self.port = free_port()
        self.proc = None
        self.lock = threading.Lock()
        self.probe_interval = "1s"
        self.user, self.password = "prometheus", "soak-scrape"
        self.tls = tls and self._make_web_config()
        os.makedirs(self.state_dir, exist_ok=True)
        shutil.copyfile(os.path.join(fixtures, "kernel", "kmsg-node.txt"), self.kmsg)
        self.write_config()

    # --- the web configuration: TLS and basic authentication -------------

    def _make_web_config(self):
        """A self-signed certificate for 127.0.0.1 and a bcrypt user; False
        (and said) where openssl or the C library's bcrypt is missing."""
        cert = os.path.join(self.scratch, "server.crt")
        key = os.path.join(self.scratch, "server.key")
        r = subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
             "-nodes", "-days", "30", "-subj", "/CN=localhost",
             "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
             "-keyout", key, "-out", cert], capture_output=True)
        digest = None
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                import crypt
                # Cost 10, what htpasswd -B makes.
                digest = crypt.crypt(self.password, crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=1024))
        except (ImportError, AttributeError, ValueError):
            pass
        if r.returncode != 0 or not digest or not digest.startswith("$2"):
            self.log("no openssl or no bcrypt in the C library: plain HTTP without authentication; "
                     "the TLS and wrong-password faults are skipped")
            return False
        self.cert = cert
        self.web_config = os.path.join(self.scratch, "web.yml")
        with open(self.web_config, "w") as f:
            f.write(f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n"
                    f"basic_auth_users:\n  {self.user}: '{digest}'\n")
        return True

    # --- the configuration ------------------------------------------------

    def config_text(self):
        nvml = ""
        if self.fake_nvml:
            nvml = f'[nvml]\nlibrary = "{self.fake_nvml}"\n'
        # Its own check socket, never the host's /run/nodewatch.
        server = f'[server]\ncheck_socket = "{self.scratch}/check.sock"\n'
        if self.tls:
            server += f'web_config_file = "{self.web_config}"\n'
        collectors = ""
        for name, extra in (("accelerator", 'pod_resources_socket = ""\n'), ("pcie", ""),
                            ("interconnect", ""), ("storage", ""), ("nic", ""),
                            ("textfile", f'directory = "{self.textfile_dir}"\n'),
                            ("kernel", f'kmsg_path = "{self.kmsg}"\nstate_file = "{self.state_file}"\n')):
            collectors += (f"[collectors.{name}]\ninterval = \"{INTERVAL}\"\n"
                           f"timeout = \"{INTERVAL}\"\n{extra}")
            if name == "storage":
                collectors += (f"[[collectors.storage.probe]]\npath = \"{self.scratch}/probe\"\n"
                               f"interval = \"{self.probe_interval}\"\ntimeout = \"1s\"\n")
        return nvml + server + collectors

    def write_config(self, text=None):
        """Writes the configuration atomically (the valid one by default)."""
        tmp = self.config + ".tmp"
        with open(tmp, "w") as f:
            f.write(self.config_text() if text is None else text)
        os.replace(tmp, self.config)

    def write_config_in_place(self, text):
        """Writes `text` over the file as a careless editor does: not atomic."""
        with open(self.config, "w") as f:
            f.write(text)

    # --- the process ------------------------------------------------------

    def start(self):
        env = dict(os.environ)
        if self.fake_nvml:
            env["FAKE_NVML_SCENARIO"] = os.path.join(self.fixtures, "nvml", "e2e_node.scenario")
        args = [self.binary, "--config", self.config, "--listen", f"127.0.0.1:{self.port}",
                "--sysfs", os.path.join(self.scratch, "node", "sys"),
                "--procfs", os.path.join(self.scratch, "node", "proc")]
        with self.lock, open(os.path.join(self.scratch, "daemon.log"), "ab") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=log, env=env,
                                         start_new_session=True)
        return self.proc.pid

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    def exited(self):
        """The exit status of the daemon if it is no longer running, else None."""
        with self.lock:
            return self.proc.poll() if self.proc else None

    def kill9(self):
        with self.lock:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def hup(self):
        self.proc.send_signal(signal.SIGHUP)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def stats(self):
        """(RSS KiB, open descriptors, threads) of the running daemon, or None."""
        pid = self.pid
        try:
            rss = threads = 0
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        rss = int(line.split()[1])
                    elif line.startswith("Threads:"):
                        threads = int(line.split()[1])
            return rss, len(os.listdir(f"/proc/{pid}/fd")), threads
        except (OSError, TypeError):
            return None

    def descriptor_groups(self):
        """The running daemon's open descriptors by what they are: the
        directory of a file (below the scratch directory as "<scratch>"),
        or the kind of a socket, pipe or anonymous inode; {} when it is not
        running."""
        groups = {}
        fd_dir = f"/proc/{self.pid}/fd"
        try:
            names = os.listdir(fd_dir)
        except (OSError, TypeError):
            return {}
        for n in names:
            try:
                target = os.readlink(os.path.join(fd_dir, n))
            except OSError:
                continue  # closed meanwhile
            if target.startswith("/"):
                key = os.path.dirname(target).replace(self.scratch, "<scratch>", 1)
            else:
                key = target.split(":[", 1)[0] if ":[" in target else target
            groups[key] = groups.get(key, 0) + 1
        return groups

    def tail_log(self, lines=20):
        try:
            with open(os.path.join(self.scratch, "daemon.log"), errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return ""
