"""What the mpirun job drivers (checkpoint_jobs.py, launcher_signal_jobs.py)
share: a job read line by line as it prints, and checks of its output that
collect their failures in `failures`."""
import os
import queue
import re
import subprocess
import threading
import time

failures = []


class Job:
    """A job whose output is read line by line as it comes (a thread), so a
    test can act on what it prints and never blocks on a silent one."""

    def __init__(self, command, env=None, new_session=False):
        # new_session: the job leads its own process group, as a terminal's
        # foreground job, and a test sends it Ctrl-C with os.killpg.
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                                        start_new_session=new_session)
        self.lines = []
        self._queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.process.stdout:
            self._queue.put(line)
        self._queue.put(None)

    def wait_for(self, pattern, seconds):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                line = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return None
            if line is None:
                self._queue.put(None)  # the end stays seen: finish() reads up to it
                return None
            self.lines.append(line)
            match = re.search(pattern, line)
            if match:
                return match
        return None

    def finish(self, seconds):
        """Waits for the job's end; (exit status, everything it printed)."""
        try:
            self.process.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            self.lines.append(f"(the job did not end within {seconds} s)\n")
        while True:
            line = self._queue.get()
            if line is None:
                break
            self.lines.append(line)
        return self.process.returncode, "".join(self.lines)

    @staticmethod
    def server_pid(server, marker):
        """The server rank's own process (mpirun's command line names it too),
        from /proc: pgrep hangs under the sanitized build's LD_PRELOAD."""
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    argv = f.read().split(b"\0")
            except OSError:
                continue
            if argv[0].decode(errors="replace") == server and any(marker.encode() in arg for arg in argv):
                return int(entry)
        return None


def expect(name, output, *patterns, code=None, rc=0):
    problems = [f"no line matches {p!r}" for p in patterns if not re.search(p, output)]
    if code is not None and (rc == 0) != (code == 0):
        problems.append(f"exit status {rc}, expected {'0' if code == 0 else 'non-zero'}")
    print(f"== {name}: {'ok' if not problems else 'FAILED'}")
    if problems:
        print(output)
        failures.extend(f"{name}: {p}" for p in problems)
