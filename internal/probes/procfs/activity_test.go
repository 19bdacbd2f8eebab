package procfs

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

func TestParseActivityStat(t *testing.T) {
	// comm with a space and a parenthesis; utime 150, stime 50.
	b := []byte("42 (pt (main) x) S 7 42 42 0 -1 4194560 100 0 0 0 150 50 0 0 20 0 3 0 12345 1000 10 ...\n")
	a, ok := parseActivityStat(42, b)
	if !ok || a.Comm != "pt (main) x" || a.State != 'S' || a.PPID != 7 || a.CPUTicks != 200 || a.Start != 12345 {
		t.Fatalf("got %+v, %v", a, ok)
	}
	if _, ok := parseActivityStat(1, []byte("1 (x) S 0")); ok {
		t.Fatal("a short stat line parsed")
	}
}

func TestParseIO(t *testing.T) {
	b := []byte("rchar: 1000\nwchar: 24\nsyscr: 5\nsyscw: 6\nread_bytes: 4096\nwrite_bytes: 0\ncancelled_write_bytes: 0\n")
	if n := parseIO(b); n != 1024 {
		t.Fatalf("rchar+wchar = %d, want 1024", n)
	}
}

func TestParseSchedstat(t *testing.T) {
	for in, want := range map[string]uint64{
		"205774862 40695471 764\n": 40695471,
		"311882 0 2":               0,
		"":                         0,
		"12345":                    0,
	} {
		if got := parseSchedstat([]byte(in)); got != want {
			t.Errorf("parseSchedstat(%q) = %d, want %d", in, got, want)
		}
	}
}

// The run-queue wait of a process is its threads', summed: here a main
// thread that sleeps and a compute thread that waited 0.9 s.
func TestActivityRunQueueWaitOfEveryThread(t *testing.T) {
	root := t.TempDir()
	files := map[string]string{
		"42/stat":              "42 (python3) S 1 42 42 0 -1 4194560 100 0 0 0 150 50 0 0 20 0 3 0 12345 1000 10\n",
		"42/schedstat":         "1000 5000 3\n",
		"42/task/42/schedstat": "1000 5000 3\n",
		"42/task/43/schedstat": "2000 900000000 40\n",
		"42/task/44/schedstat": "0 0 0\n",
	}
	for name, text := range files {
		path := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got := NewActivityReader(root).Read(nil, []Proc{{PID: 42}})
	if len(got) != 1 || got[0].RunQueueNs != 900005000 {
		t.Fatalf("got %+v, want the run-queue wait of threads 42, 43 and 44: 900005000 ns", got)
	}
}

// Two CPU-bound processes pinned to one CPU: each waits on the run queue
// while the other runs, so the one read has waited for a CPU by the time it
// has run for a while. This is what tells a spin starved on a busy machine
// from a sleeper.
func TestActivityRunQueueWait(t *testing.T) {
	if _, err := os.Stat("/proc/self/schedstat"); err != nil {
		t.Skipf("this kernel has no /proc/PID/schedstat (CONFIG_SCHED_INFO): %v", err)
	}
	taskset, err := exec.LookPath("taskset")
	if err != nil {
		t.Skip("taskset (util-linux) is needed to pin two processes to one CPU")
	}
	var spins []*exec.Cmd
	for range 2 {
		c := exec.Command(taskset, "-c", "0", "sh", "-c", "while :; do :; done")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Process.Kill(); c.Wait() })
		spins = append(spins, c)
	}
	self, err := ReadStat("", spins[0].Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	r := NewActivityReader("")
	first := r.Read(nil, []Proc{self})
	if len(first) != 1 {
		t.Fatalf("read %d processes, want the spin", len(first))
	}
	// Until it has run 20 ticks; the other spin ran meanwhile on the same
	// CPU, and this one waited for it.
	var now []Activity
	deadline := time.Now().Add(time.Minute)
	for now = r.Read(nil, []Proc{self}); len(now) == 1 && now[0].CPUTicks < first[0].CPUTicks+20; now = r.Read(nil, []Proc{self}) {
		if time.Now().After(deadline) {
			t.Fatalf("the spin ran %d ticks in a minute", now[0].CPUTicks-first[0].CPUTicks)
		}
		time.Sleep(10 * time.Millisecond) // the spin's CPU time: nothing to wait on
	}
	if len(now) != 1 || now[0].RunQueueNs <= first[0].RunQueueNs {
		t.Fatalf("a spin sharing its CPU with another did not wait for it: run-queue %d ns then %+v", first[0].RunQueueNs, now)
	}
	t.Logf("ran %d ticks, waited %.2fs", now[0].CPUTicks-first[0].CPUTicks, float64(now[0].RunQueueNs-first[0].RunQueueNs)/1e9)
}

func TestIsLoaderWorker(t *testing.T) {
	for _, tc := range []struct {
		comm, cmd, pcomm, pcmd string
		want                   bool
	}{
		{"pt_data_worker", "python train.py", "python", "python train.py", true},
		{"python3", "python3 -c from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=5)", "python3", "python3 train.py", true},
		{"python3", "python3 train.py", "python3", "python3 train.py", true}, // forked
		{"python3", "python3 train.py --local-rank 0", "torchrun", "torchrun train.py", false},
		{"sleep", "sleep 600", "python3", "python3 train.py", false},
	} {
		if got := IsLoaderWorker(tc.comm, tc.cmd, tc.pcomm, tc.pcmd); got != tc.want {
			t.Errorf("%+v: %v", tc, got)
		}
	}
}

// The reader reads this very process: it has used CPU, and its I/O
// counters can be read (same user).
func TestActivityReadSelf(t *testing.T) {
	self, err := ReadStat("", os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	r := NewActivityReader("")
	// Work until the kernel has counted a tick of CPU time.
	x := 0
	for i := 0; len(r.Read(nil, []Proc{self})) == 1 && r.Read(nil, []Proc{self})[0].CPUTicks == 0; i++ {
		for j := range 1 << 20 {
			x += j * i
		}
	}
	_ = x
	got := r.Read(nil, []Proc{self, {PID: os.Getpid(), Start: self.Start + 1}})
	if len(got) != 1 {
		t.Fatalf("read %d processes, want 1 (the second names a reused pid)", len(got))
	}
	if got[0].PID != os.Getpid() || got[0].CPUTicks == 0 || !got[0].IOKnown {
		t.Fatalf("got %+v", got[0])
	}
}

func BenchmarkActivityRead(b *testing.B) {
	self, err := ReadStat("", os.Getpid())
	if err != nil {
		b.Fatal(err)
	}
	procs := []Proc{self, self, self, self, self, self, self, self, self}
	r := NewActivityReader("")
	var dst []Activity
	b.ReportAllocs()
	for b.Loop() {
		dst = r.Read(dst[:0], procs)
	}
}
