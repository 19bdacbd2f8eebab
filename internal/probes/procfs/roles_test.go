package procfs

import (
	"bufio"
	"os/exec"
	"testing"
)

// A Python process whose forked child (a DataLoader-like worker: same
// command line) holds 64 MiB: the sample puts it on the workers' side.
func TestRolesSplitWorkers(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is needed for a forked worker")
	}
	const script = `import os, sys
r, w = os.pipe()
if os.fork() == 0:
    held = b"\1" * (64 << 20)
    os.write(w, b"x")
    sys.stdin.read()  # until the test closes it
    os._exit(0)
os.read(r, 1)
print("ready", flush=True)
sys.stdin.read()
`
	cmd := exec.Command(py, "-c", script)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); cmd.Wait() }()
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("the job did not start its worker: %q %v", line, err)
	}
	hs, err := ReadHost("/proc", cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if hs.Workers != 1 || hs.WorkerBytes < 64<<20 || hs.WorkerBytes <= hs.MainBytes {
		t.Errorf("workers %d holding %d bytes, main %d: want the worker's 64 MiB on its side", hs.Workers, hs.WorkerBytes, hs.MainBytes)
	}
	if hs.MainBytes+hs.WorkerBytes != hs.TreeBytes() && hs.PSSBytes > 0 {
		t.Errorf("roles %d + %d do not add up to the footprint %d", hs.MainBytes, hs.WorkerBytes, hs.TreeBytes())
	}
}
