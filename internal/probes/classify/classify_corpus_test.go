package classify

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/gpuguard/gpuguard/internal/lines"
)

// corpusDir is the shared corpus of real-format logs, relative to this
// package (the repository's sibling "shared" folder), or where
// GPUGUARD_CORPUS says (a checkout that is not beside it).
var corpusDir = func() string {
	if d := os.Getenv("GPUGUARD_CORPUS"); d != "" {
		return d
	}
	return "../../../../shared/corpus"
}()

type corpusEntry struct {
	File      string                     `json:"file"`
	Framework string                     `json:"framework"`
	Expected  map[string]json.RawMessage `json:"expected"`
	Note      string                     `json:"note"`
}

func loadManifest(t *testing.T) []corpusEntry {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(corpusDir, "manifest.json"))
	if errors.Is(err, os.ErrNotExist) {
		t.Skipf("corpus not found at %s (it is the shared test corpus beside the repository); skipping the corpus tests", corpusDir)
	}
	if err != nil {
		t.Fatal(err)
	}
	var m []corpusEntry
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("manifest.json: %v", err)
	}
	if len(m) == 0 {
		t.Fatal("manifest.json lists no samples")
	}
	return m
}

// str returns the manifest string value of key, whether the key is present,
// and whether the value is null.
func (e corpusEntry) str(key string) (s string, present, null bool) {
	raw, ok := e.Expected[key]
	if !ok {
		return "", false, false
	}
	if string(raw) == "null" {
		return "", true, true
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		return string(raw), true, false
	}
	return s, true, false
}

// manifestBytes is the test's own reading of a manifest size: "2.47 GiB",
// "0 bytes", "612.40 MiB", "812.3KiB", "5.37GiB (5767168000B)", "47185920
// bytes", "3GB", "7.82 GB". Binary units throughout (the allocators that
// print GB and MB divide by powers of 1024). An exact byte count in
// parentheses wins. TensorFlow's "shape[...]" is handled by the caller.
var (
	reExact = regexp.MustCompile(`\((\d+)\s?B\)`)
	reSize  = regexp.MustCompile(`^(\d+(?:\.\d+)?)\s?([A-Za-z]*)$`)
)

func manifestBytes(s string) (int64, error) {
	if m := reExact.FindStringSubmatch(s); m != nil {
		return strconv.ParseInt(m[1], 10, 64)
	}
	m := reSize.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return 0, fmt.Errorf("cannot read size %q", s)
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0, err
	}
	mult := map[string]float64{
		"": 1, "B": 1, "bytes": 1, "byte": 1,
		"KiB": 1 << 10, "KB": 1 << 10, "kB": 1 << 10, "K": 1 << 10,
		"MiB": 1 << 20, "MB": 1 << 20, "M": 1 << 20,
		"GiB": 1 << 30, "GB": 1 << 30, "G": 1 << 30,
		"TiB": 1 << 40, "TB": 1 << 40,
	}[m[2]]
	if mult == 0 {
		return 0, fmt.Errorf("unknown unit in %q", s)
	}
	return int64(math.Round(v * mult)), nil
}

// tfShapeBytes computes the size of a TensorFlow "shape[...]" from the type
// printed next to it in the log.
func tfShapeBytes(shape string, log []byte) (int64, error) {
	re := regexp.MustCompile(regexp.QuoteMeta(shape) + ` and type (\w+)`)
	m := re.FindSubmatch(log)
	if m == nil {
		return 0, fmt.Errorf("type of %s not found in the log", shape)
	}
	size := map[string]int64{"float": 4, "half": 2, "double": 8, "int32": 4, "int64": 8, "bfloat16": 2, "uint8": 1, "int8": 1, "bool": 1}[string(m[1])]
	if size == 0 {
		return 0, fmt.Errorf("unknown type %s", m[1])
	}
	n := int64(1)
	for _, d := range strings.Split(strings.TrimSuffix(strings.TrimPrefix(shape, "shape["), "]"), ",") {
		v, err := strconv.ParseInt(strings.TrimSpace(d), 10, 64)
		if err != nil {
			return 0, err
		}
		n *= v
	}
	return n * size, nil
}

// classifyTrace runs the classifier over a log and records the phase each
// recognised line shows.
func classifyTrace(t testing.TB, data []byte) (Verdict, map[int][]Phase) {
	t.Helper()
	c, err := NewClassifier(ClassifierOptions{})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int][]Phase{}
	c.trace = func(num int, p Phase) { seen[num] = append(seen[num], p) }
	s := lines.New(lines.DefaultMax, c.Line)
	s.Write(data)
	s.Flush()
	return c.Verdict(), seen
}

// Every log of the shared corpus, against its manifest entry.
func TestCorpus(t *testing.T) {
	for _, e := range loadManifest(t) {
		e := e
		t.Run(strings.TrimSuffix(e.File, ".log"), func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join(corpusDir, e.File))
			if err != nil {
				t.Fatal(err)
			}
			v, seen := classifyTrace(t, data)
			checkCorpusEntry(t, e, data, v, seen)
		})
	}
}

// failureReasons maps the manifest's failure labels to words the verdict's
// reason must contain.
var failureReasons = map[string]string{
	"segfault":                   "segmentation fault",
	"cuda_device_side_assert":    "device-side assert",
	"cuda_illegal_memory_access": "illegal memory access",
	"cuda_no_kernel_image":       "no CUDA kernel image",
	"nccl_timeout":               "NCCL timeout",
	"nan_loss":                   "NaN",
	"import_error":               "import error",
	"module_not_found":           "module not found",
	"file_not_found_checkpoint":  "checkpoint file not found",
	"child_failed_exitcode_1":    "exited with code 1",
}

func checkCorpusEntry(t *testing.T, e corpusEntry, data []byte, v Verdict, seen map[int][]Phase) {
	t.Helper()
	kind, _, _ := e.str("kind")
	failureLabel, hasFailure, _ := e.str("failure")
	want := Kind(kind)
	if want == KindNone && hasFailure && failureLabel != "" {
		want = KindCrash
	}
	if v.Kind != want {
		t.Errorf("kind = %s (%s, line %d: %q), want %s", v.Kind, v.Reason, v.Line, v.Text, want)
	}
	if want == KindCrash {
		if words, ok := failureReasons[failureLabel]; ok && !strings.Contains(v.Reason, words) {
			t.Errorf("reason = %q, want it to contain %q (failure %s)", v.Reason, words, failureLabel)
		}
	}
	if v.Kind != KindNone && (v.Line < 1 || v.Text == "") {
		t.Errorf("failure without a line: line %d, text %q", v.Line, v.Text)
	}
	phase, _, null := e.str("phase")
	if null {
		phase = ""
	}
	if string(v.Phase) != phase {
		t.Errorf("phase = %q, want %q (marks %v)", v.Phase, phase, v.Phases)
	}
	// markers: each names one line, which must be recognised as that phase.
	if raw, ok := e.Expected["markers"]; ok {
		var markers []struct {
			LineContains string `json:"line_contains"`
			Phase        string `json:"phase"`
		}
		if err := json.Unmarshal(raw, &markers); err != nil {
			t.Fatalf("markers: %v", err)
		}
		for _, m := range markers {
			n := lineContaining(t, data, m.LineContains)
			if n == 0 {
				continue
			}
			ok := false
			for _, p := range seen[n] {
				ok = ok || string(p) == m.Phase
			}
			if !ok {
				t.Errorf("line %d (%q) should be recognised as %s; recognised as %v", n, m.LineContains, m.Phase, seen[n])
			}
		}
	}
	if r, present, null := e.str("rank"); present {
		switch {
		case null && v.Rank != nil:
			t.Errorf("rank = %d, want none", *v.Rank)
		case !null && (v.Rank == nil || strconv.Itoa(*v.Rank) != r):
			t.Errorf("rank = %v, want %s", fmtPtr(v.Rank), r)
		}
	}
	if v.Kind != KindGPUOOM && v.Kind != KindCPUAllocOOM {
		return
	}
	o := v.OOM
	if o == nil {
		t.Fatalf("%s without OOM figures", v.Kind)
	}
	if f, present, _ := e.str("format"); present && o.Format != f {
		t.Errorf("format = %q, want %q", o.Format, f)
	}
	if ex, present, null := e.str("exception"); present {
		if null {
			ex = ""
		}
		if o.Exception != ex {
			t.Errorf("exception = %q, want %q", o.Exception, ex)
		}
	}
	if d, present, null := e.str("device"); present {
		switch {
		case null && o.Device != nil:
			t.Errorf("device = %q, want none", *o.Device)
		case !null && (o.Device == nil || *o.Device != d):
			t.Errorf("device = %v, want %q", fmtPtr(o.Device), d)
		}
	}
	checkBytes := func(key string, got *int64) {
		t.Helper()
		s, present, null := e.str(key)
		if !present {
			return
		}
		if null {
			if got != nil {
				t.Errorf("%s = %d, the log does not show it", key, *got)
			}
			return
		}
		var w int64
		var err error
		if strings.HasPrefix(s, "shape[") {
			w, err = tfShapeBytes(s, data)
		} else {
			w, err = manifestBytes(s)
		}
		if err != nil {
			t.Errorf("%s: %v", key, err)
			return
		}
		if got == nil || *got-w > 1 || w-*got > 1 {
			t.Errorf("%s = %v bytes, want %d (%s)", key, fmtPtr(got), w, s)
		}
	}
	checkBytes("requested", o.RequestedBytes)
	checkBytes("total", o.TotalBytes)
	checkBytes("free", o.FreeBytes)
	checkBytes("in_use", o.InUseBytes)
	if _, isMPS := e.Expected["other_allocations"]; !isMPS {
		checkBytes("allocated", o.AllocatedBytes)
	} else {
		checkBytes("allocated", o.AllocatedBytes)
	}
	checkBytes("private_pools", o.PrivatePoolsBytes)
	rk, _, _ := e.str("reserved_kind")
	switch rk {
	case "reserved_but_unallocated", "cached":
		checkBytes("reserved", o.ReservedUnallocatedBytes)
	case "reserved_total":
		checkBytes("reserved", o.ReservedTotalBytes)
	default:
		if _, _, null := e.str("reserved"); null && (o.ReservedTotalBytes != nil || o.ReservedUnallocatedBytes != nil) {
			t.Errorf("reserved figures %v/%v, the log shows none", fmtPtr(o.ReservedTotalBytes), fmtPtr(o.ReservedUnallocatedBytes))
		}
	}
	// The derived reserved figure: total = allocated + unallocated.
	if o.AllocatedBytes != nil && o.ReservedTotalBytes != nil && o.ReservedUnallocatedBytes != nil &&
		*o.ReservedTotalBytes != *o.AllocatedBytes+*o.ReservedUnallocatedBytes {
		t.Errorf("reserved total %d != allocated %d + unallocated %d", *o.ReservedTotalBytes, *o.AllocatedBytes, *o.ReservedUnallocatedBytes)
	}
	if raw, ok := e.Expected["other_processes"]; ok {
		var ps []struct{ PID, InUse string }
		if err := json.Unmarshal(bytes.ReplaceAll(raw, []byte(`"in_use"`), []byte(`"InUse"`)), &ps); err != nil {
			t.Fatal(err)
		}
		if len(ps) != len(o.OtherProcesses) {
			t.Fatalf("other processes = %+v, want %s", o.OtherProcesses, raw)
		}
		for i, p := range ps {
			w, err := manifestBytes(p.InUse)
			if err != nil {
				t.Fatal(err)
			}
			if strconv.Itoa(o.OtherProcesses[i].PID) != p.PID || o.OtherProcesses[i].Bytes-w > 1 || w-o.OtherProcesses[i].Bytes > 1 {
				t.Errorf("other process %d = %+v, want pid %s with %d bytes", i, o.OtherProcesses[i], p.PID, w)
			}
		}
		if !v.OtherProcesses {
			t.Error("Verdict.OtherProcesses is false for a message listing other processes")
		}
	}
}

// lineContaining returns the 1-based number of the only line containing s.
func lineContaining(t *testing.T, data []byte, s string) int {
	t.Helper()
	found := 0
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		if strings.Contains(sc.Text(), s) {
			if found != 0 {
				t.Errorf("marker %q is on lines %d and %d", s, found, n)
				return 0
			}
			found = n
		}
	}
	if found == 0 {
		t.Errorf("marker %q is on no line of the log", s)
	}
	return found
}

func fmtPtr[T any](p *T) string {
	if p == nil {
		return "<nil>"
	}
	return fmt.Sprint(*p)
}
