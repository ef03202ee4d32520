"""The kernel log the daemon reads: the modelled node's records
(tests/fixtures/kernel/kmsg-node.txt), then the records the soak appends.

Every appended record is an XID that nothing else logs (XID_CODE on the
GPU at XID_DEVICE), so that the count of
nodewatch_kernel_xid_events_total{pci_bus_id=XID_DEVICE,xid=XID_CODE}
must equal the records appended, exactly, at the end.

The daemon reads a file of records whole on each pass (a fixture's
`kmsg_path`), and a read that meets an append half done sees a record cut
short, which /dev/kmsg never gives; it would be counted by its sequence
number and the whole record skipped later. So that every read sees whole
records, no record crosses a 4 KiB page (the kernel makes an append
visible a page at a time): where one would, empty lines fill the page
first, and the daemon skips empty lines.
"""

import os
import threading

XID_DEVICE = "0000:4a:00.0"
XID_CODE = "31"
PAGE = 4096
# Appended records at most in one run: the daemon reads the file whole on
# each pass, so an unbounded file would measure the re-reading, not the
# daemon's growth.
MAX_RECORDS = 20000


class KernelLog:
    def __init__(self, path):
        self.path = path
        self.lock = threading.Lock()
        with open(path) as f:
            records = [line for line in f if line[:1].isdigit()]
        last = records[-1].split(";", 1)[0].split(",")
        self.seq = int(last[1]) + 1
        self.usec = int(last[2]) + 1_000_000
        self.injected = 0
        self.refused = 0  # asked for beyond MAX_RECORDS

    def _record(self):
        text = (f"4,{self.seq},{self.usec},-;NVRM: Xid (PCI:{XID_DEVICE[:-2]}): {XID_CODE}, "
                f"pid=4242, name=soak, Ch 00000008, intr 10000000. MMU Fault: ENGINE GRAPHICS "
                f"GPCCLIENT_T1_0 faulted @ 0x7f4b_2a000000. Fault is of type FAULT_PDE "
                f"ACCESS_TYPE_VIRT_READ seq {self.seq}")
        self.seq += 1
        self.usec += 1000
        return text

    def append(self, n):
        """Appends n records (fewer past MAX_RECORDS); returns how many."""
        with self.lock:
            n = min(n, MAX_RECORDS - self.injected)
            if n <= 0:
                self.refused += 1
                return 0
            size = os.path.getsize(self.path)
            out = []
            for _ in range(n):
                rec = self._record()
                room = PAGE - size % PAGE
                if len(rec) + 1 > room:
                    out.append("\n" * room)
                    size += room
                out.append(rec + "\n")
                size += len(rec) + 1
            data = "".join(out).encode()
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
            self.injected += n
            return n
