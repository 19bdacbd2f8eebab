package supervisor

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuguard/gpuguard/internal/policy"
	"github.com/gpuguard/gpuguard/internal/probes/gpu"
)

// The memo lives in the user's cache directory, as os.UserCacheDir finds
// it: XDG_CACHE_HOME when set.
func TestMemoPathHonoursXDGCacheHome(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", dir)
	got, err := memoPath()
	if err != nil || got != filepath.Join(dir, "gpuguard", "memo.json") {
		t.Fatalf("memoPath() = %q, %v; want %s", got, err, filepath.Join(dir, "gpuguard", "memo.json"))
	}
	t.Setenv("XDG_CACHE_HOME", "")
	t.Setenv("HOME", dir)
	if got, err := memoPath(); err != nil || got != filepath.Join(dir, ".cache", "gpuguard", "memo.json") {
		t.Fatalf("without XDG_CACHE_HOME: memoPath() = %q, %v; want under $HOME/.cache", got, err)
	}
}

// Runs that end at once each merge their own entry: none is lost, and the
// file is always whole JSON.
func TestMemoConcurrentUpdatesMerge(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gpuguard", "memo.json")
	const n = 16
	start := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			e := &memoEntry{Command: []string{"train.py", fmt.Sprint(i)}, To: policy.Values{"batch_size": policy.Text(fmt.Sprint(i))}}
			if _, err := updateMemo(path, fmt.Sprintf("key%d", i), e); err != nil {
				errs <- err
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	m, err := readMemo(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		e, ok := m.Entries[fmt.Sprintf("key%d", i)]
		if !ok || e.To["batch_size"].Text != fmt.Sprint(i) {
			t.Errorf("entry key%d lost or wrong: %+v", i, e)
		}
	}
	left, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".memo.json.tmp-*"))
	if len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

// A corrupt memo reads as empty with an error saying which file and what
// to do; the next update replaces it with a good one.
func TestMemoCorruptIsReplaced(t *testing.T) {
	path := filepath.Join(t.TempDir(), "memo.json")
	if err := os.WriteFile(path, []byte(`{"version": 2, "entries": {"ab`), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := readMemo(path)
	if err == nil || !strings.Contains(err.Error(), path+" is not a memo gpuguard can read") || len(m.Entries) != 0 {
		t.Fatalf("readMemo of a corrupt file: %v, %d entries", err, len(m.Entries))
	}
	if err := os.WriteFile(path, []byte(`{"version": 1, "entries": {}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readMemo(path); err == nil || !strings.Contains(err.Error(), "format version 1, not 2") {
		t.Fatalf("readMemo of an old version: %v", err)
	}
	if _, err := updateMemo(path, "k", &memoEntry{To: policy.Values{"a": policy.Text("1")}}); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(path)
	var got memo
	if err := json.Unmarshal(data, &got); err != nil || got.Entries["k"].To["a"].Text != "1" {
		t.Fatalf("after the update: %v %s", err, data)
	}
	if m, err := readMemo(filepath.Join(t.TempDir(), "none.json")); err != nil || len(m.Entries) != 0 {
		t.Fatalf("a missing memo is an empty one, with no error: %v", err)
	}
}

// The key tells devices apart: a value that fitted on a 40 GB A100 is not
// used on an 80 GB one, nor on the host.
func TestMemoKeyNamesTheDevice(t *testing.T) {
	a40 := memoDevice([]gpu.Device{{Name: "NVIDIA A100-SXM4-40GB", TotalBytes: 40 << 30}})
	a80 := memoDevice([]gpu.Device{{Name: "NVIDIA A100-SXM4-80GB", TotalBytes: 80 << 30}})
	host := memoDevice(nil)
	if a40 != "NVIDIA A100-SXM4-40GB 40.00 GiB" || !strings.HasPrefix(host, "host ") {
		t.Errorf("devices %q, %q", a40, host)
	}
	argv := []string{"python", "train.py"}
	keys := map[string]bool{memoKey("p", argv, a40): true, memoKey("p", argv, a80): true, memoKey("p", argv, host): true,
		memoKey("q", argv, a40): true, memoKey("p", []string{"python", "train.py", "--bs", "8"}, a40): true}
	if len(keys) != 5 {
		t.Errorf("keys collide: %v", keys)
	}
}

// docs/policy.md quotes both memo lines; they are what the code prints for
// the values, path, run and device they show.
func TestDocsQuoteTheMemoLines(t *testing.T) {
	doc, err := os.ReadFile("../../docs/policy.md")
	if err != nil {
		t.Fatal(err)
	}
	at, err := time.Parse(time.DateTime, "2026-11-25 11:04:57")
	if err != nil {
		t.Fatal(err)
	}
	device := "host RAM 23.54 GiB RLIMIT_DATA 8.00 GiB"
	for _, line := range []string{
		memoRememberedLine(policy.Values{"batch_size": policy.Text("128")}, "/home/u/.cache/gpuguard/memo.json", device),
		memoStartingLine(memoEntry{To: policy.Values{"batch_size": policy.Text("128")}, From: policy.Values{"batch_size": policy.Text("256")},
			Run: "/work/exp/.gpuguard/runs/20261125-110456-dfa28c", At: at, Device: device}, "/work/exp"),
	} {
		if !strings.Contains(string(doc), "\n"+line+"\n") {
			t.Errorf("docs/policy.md does not quote, on a line of its own:\n%s", line)
		}
	}
}
