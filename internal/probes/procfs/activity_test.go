package procfs

import (
	"os"
	"testing"
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
