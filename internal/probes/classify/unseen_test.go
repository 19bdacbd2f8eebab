package classify

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// The classifier's own corpus is split in two (testdata/unseen): the
// mechanisms were built from the "built" half; the "measured" half was
// written before them, from other public reports of the same structures in
// other wordings, and is only measured. A mechanism that scores well only on
// the built half is a pattern, not a mechanism.
//
//	go test ./internal/probes/classify -run TestUnseenHalves -v
//
// prints both halves' figures (and the shared corpus's, when it is there),
// the table docs/classifier.md quotes.

// halfScore counts what a half of the corpus got right.
type halfScore struct {
	logs, kinds, falseOOM int
	phases, phasesRight   int
	markers, markersRight int
	figures, figuresRight int
	misses                []string
}

func (s halfScore) String() string {
	pct := func(a, b int) string {
		if b == 0 {
			return "—"
		}
		return fmt.Sprintf("%d/%d", a, b)
	}
	return fmt.Sprintf("kinds %s, false OOMs %d, phase %s, markers %s, figures %s",
		pct(s.kinds, s.logs), s.falseOOM, pct(s.phasesRight, s.phases), pct(s.markersRight, s.markers), pct(s.figuresRight, s.figures))
}

// scoreDir classifies every log of a manifest and scores it.
func scoreDir(t *testing.T, dir string) halfScore {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		t.Fatalf("reading the manifest of %s: %v", dir, err)
	}
	var m []corpusEntry
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("%s/manifest.json: %v", dir, err)
	}
	var s halfScore
	for _, e := range m {
		data, err := os.ReadFile(filepath.Join(dir, e.File))
		if err != nil {
			t.Fatal(err)
		}
		v, seen := classifyTrace(t, data)
		scoreEntry(&s, e, data, v, seen)
	}
	return s
}

func isOOMKind(k Kind) bool { return k == KindGPUOOM || k == KindCPUAllocOOM || k == KindHostOOM }

// scoreEntry adds one log's figures to s: its kind (and, for a host OOM,
// the reporter named in the reason), its phase, each marker, each OOM
// figure.
func scoreEntry(s *halfScore, e corpusEntry, data []byte, v Verdict, seen map[int][]Phase) {
	miss := func(format string, a ...any) { s.misses = append(s.misses, e.File+": "+fmt.Sprintf(format, a...)) }
	s.logs++
	kind, _, _ := e.str("kind")
	want := Kind(kind)
	if f, ok, _ := e.str("failure"); want == KindNone && ok && f != "" {
		want = KindCrash
	}
	okKind := v.Kind == want
	if rep, ok, _ := e.str("reporter"); ok && okKind && !strings.Contains(v.Reason, rep) {
		okKind = false
		miss("reason %q does not name the reporter %s", v.Reason, rep)
	}
	if okKind {
		s.kinds++
	} else if v.Kind != want {
		miss("kind %s (%s, line %d), want %s", v.Kind, v.Reason, v.Line, want)
	}
	if isOOMKind(v.Kind) && !isOOMKind(want) {
		s.falseOOM++
	}
	if p, present, null := e.str("phase"); present {
		if null {
			p = ""
		}
		s.phases++
		if string(v.Phase) == p {
			s.phasesRight++
		} else {
			miss("phase %q, want %q", v.Phase, p)
		}
	}
	if raw, ok := e.Expected["markers"]; ok {
		var markers []struct {
			LineContains string `json:"line_contains"`
			Phase        string `json:"phase"`
		}
		_ = json.Unmarshal(raw, &markers)
		for _, m := range markers {
			s.markers++
			n := 0
			for i, l := range strings.Split(string(data), "\n") {
				if strings.Contains(l, m.LineContains) {
					n = i + 1
					break
				}
			}
			hit := false
			for _, p := range seen[n] {
				hit = hit || string(p) == m.Phase
			}
			if hit {
				s.markersRight++
			} else {
				miss("marker %q: %v, want %s", m.LineContains, seen[n], m.Phase)
			}
		}
	}
	var o *OOM
	if v.Kind == want {
		o = v.OOM
	}
	fig := func(key string, got *int64) {
		val, present, null := e.str(key)
		if !present {
			return
		}
		s.figures++
		ok := false
		switch {
		case null:
			ok = got == nil
		case got != nil:
			w, err := manifestBytes(val)
			if strings.HasPrefix(val, "shape[") {
				w, err = tfShapeBytes(val, data)
			}
			ok = err == nil && *got-w <= 1 && w-*got <= 1
		}
		if ok {
			s.figuresRight++
		} else {
			miss("%s = %s, want %s", key, fmtPtr(got), val)
		}
	}
	if want == KindGPUOOM || want == KindCPUAllocOOM {
		if o == nil {
			o = &OOM{}
		}
		fig("requested", o.RequestedBytes)
		fig("total", o.TotalBytes)
		fig("free", o.FreeBytes)
		fig("in_use", o.InUseBytes)
		fig("allocated", o.AllocatedBytes)
		if rk, _, _ := e.str("reserved_kind"); rk == "reserved_total" {
			fig("reserved", o.ReservedTotalBytes)
		} else {
			fig("reserved", o.ReservedUnallocatedBytes)
		}
		for _, k := range []string{"format", "exception", "device"} {
			val, present, null := e.str(k)
			if !present {
				continue
			}
			s.figures++
			got := map[string]string{"format": o.Format, "exception": o.Exception}[k]
			if k == "device" && o.Device != nil {
				got = *o.Device
			}
			if null && got == "" || got == val {
				s.figuresRight++
			} else {
				miss("%s = %q, want %q", k, got, val)
			}
		}
	}
	if r, present, _ := e.str("rank"); present {
		s.figures++
		if v.Rank != nil && fmt.Sprint(*v.Rank) == r {
			s.figuresRight++
		} else {
			miss("rank = %s, want %s", fmtPtr(v.Rank), r)
		}
	}
}

func TestUnseenHalves(t *testing.T) {
	halves := []struct{ name, dir string }{
		{"built from", filepath.Join("testdata", "unseen", "built")},
		{"measured", filepath.Join("testdata", "unseen", "measured")},
		{"measured (2)", filepath.Join("testdata", "unseen", "measured2")},
		{"held-out", filepath.Join("testdata", "heldout")},
	}
	if _, err := os.Stat(filepath.Join(corpusDir, "manifest.json")); err == nil {
		halves = append(halves, struct{ name, dir string }{"shared corpus", corpusDir})
	}
	doc, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "classifier.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range halves {
		s := scoreDir(t, h.dir)
		line := fmt.Sprintf("%-13s %2d logs: %s", h.name, s.logs, s)
		t.Log(line)
		if h.name != "shared corpus" && !strings.Contains(string(doc), "\n"+line+"\n") {
			t.Errorf("docs/classifier.md does not quote the figures it prints: %q", line)
		}
		sort.Strings(s.misses)
		for _, m := range s.misses {
			t.Logf("    miss: %s", m)
		}
		if s.falseOOM > 0 {
			t.Errorf("%s: %d false OOM(s)", h.name, s.falseOOM)
		}
		if h.name == "built from" && len(s.misses) > 0 {
			t.Errorf("the half the mechanisms were built from has misses (above)")
		}
	}
}
