package checkpoint

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// torchLikeZip is a zip as torch.save writes one: stored entries under
// archive/, the pickle first, then the tensors' bytes.
func torchLikeZip(t testing.TB, comment string) []byte {
	t.Helper()
	var b bytes.Buffer
	z := zip.NewWriter(&b)
	for _, e := range []struct{ name, data string }{
		{"archive/data.pkl", "\x80\x02}q\x00."},
		{"archive/data/0", strings.Repeat("w", 5000)},
		{"archive/version", "3\n"},
	} {
		w, err := z.CreateHeader(&zip.FileHeader{Name: e.name, Method: zip.Store})
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(e.data))
	}
	if comment != "" {
		z.SetComment(comment)
	}
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func safetensors(t *testing.T) []byte {
	t.Helper()
	hdr := []byte(`{"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[2],"data_offsets":[16,24]}}  `)
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(hdr)))
	out = append(out, hdr...)
	return append(out, make([]byte, 24)...)
}

func write(t *testing.T, path string, data []byte) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// Every prefix of a checkpoint (a file cut short where its writer died) is
// truncated; the whole file is complete. Nothing is written to the files.
func TestCheckStructureEveryCut(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []struct {
		name string
		data []byte
	}{
		{"model.pt", torchLikeZip(t, "")},
		{"commented.pth", torchLikeZip(t, "a comment with PK\x05\x06 inside")},
		{"model.safetensors", safetensors(t)},
	} {
		path := write(t, filepath.Join(dir, f.name), f.data)
		if s, why := CheckStructure(path); s != StructureComplete {
			t.Errorf("%s whole: %v (%s), want complete", f.name, s, why)
		}
		cut := filepath.Join(dir, "cut-"+f.name)
		for n := 9; n < len(f.data); n += 1 + n/50 {
			write(t, cut, f.data[:n])
			before, _ := os.Stat(cut)
			if s, why := CheckStructure(cut); s != StructureTruncated {
				t.Fatalf("%s cut at %d of %d bytes: %v (%s), want truncated", f.name, n, len(f.data), s, why)
			}
			after, _ := os.Stat(cut)
			if !after.ModTime().Equal(before.ModTime()) || after.Size() != before.Size() {
				t.Fatalf("CheckStructure changed %s", cut)
			}
		}
	}
}

func TestCheckStructureUnknownAndDirectories(t *testing.T) {
	dir := t.TempDir()
	pickle := write(t, filepath.Join(dir, "legacy.pt"), []byte("\x80\x02\x8a\x0alegacy torch pickle"))
	if s, _ := CheckStructure(pickle); s != StructureUnknown {
		t.Errorf("a pickle: %v, want unknown", s)
	}
	// A Hugging Face checkpoint directory: config, a sharded model, a
	// torch.save'd optimizer. Complete while each known file is whole.
	hf := filepath.Join(dir, "checkpoint-500")
	write(t, filepath.Join(hf, "config.json"), []byte(`{}`))
	write(t, filepath.Join(hf, "model-00001-of-00002.safetensors"), safetensors(t))
	write(t, filepath.Join(hf, "model-00002-of-00002.safetensors"), safetensors(t))
	opt := torchLikeZip(t, "")
	write(t, filepath.Join(hf, "optimizer.pt"), opt)
	if s, why := CheckStructure(hf); s != StructureComplete {
		t.Errorf("whole directory: %v (%s)", s, why)
	}
	write(t, filepath.Join(hf, "optimizer.pt"), opt[:len(opt)/2])
	if s, why := CheckStructure(hf); s != StructureTruncated || !strings.HasPrefix(why, "optimizer.pt: zip archive") {
		t.Errorf("directory with a cut optimizer.pt: %v (%s), want truncated naming it", s, why)
	}
	plain := filepath.Join(dir, "plain")
	write(t, filepath.Join(plain, "weights.h5"), []byte("HDF"))
	if s, _ := CheckStructure(plain); s != StructureUnknown {
		t.Errorf("directory of unknown formats: %v", s)
	}
}

// A writer that writes slowly, in place: at every look before its last
// byte the file is truncated, and the resume choice passes it over naming
// the cut, in favour of the one before; once whole, it is taken at once
// though it changed a moment before the job ended. The test itself writes,
// so each look is between two writes it controls.
func TestSlowWriterIsPassedOverUntilWhole(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "step_100.pt"), torchLikeZip(t, ""))
	old := time.Now().Add(-time.Hour)
	os.Chtimes(filepath.Join(dir, "step_100.pt"), old, old)
	data := torchLikeZip(t, "")
	f, err := os.Create(filepath.Join(dir, "step_200.pt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	spec := Spec{Globs: []string{"step_*.pt"}, Choose: "highest_step"}
	look := func() Selection {
		all, err := Scan(dir, spec, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		Annotate(Resume{Choose: "highest_step", WritersGone: time.Now()}, all, nil)
		return Select(Resume{Choose: "highest_step", WritersGone: time.Now()}, all)
	}
	for off := 0; off < len(data); off += 1000 {
		end := min(off+1000, len(data))
		if _, err := f.Write(data[off:end]); err != nil {
			t.Fatal(err)
		}
		s := look()
		if end < len(data) {
			if !s.Found || filepath.Base(s.Best.Path) != "step_100.pt" || len(s.Passed) != 1 || !strings.HasPrefix(s.Passed[0].Reason, "cut short: zip archive") {
				t.Fatalf("after %d of %d bytes: best %s, passed %+v; want step_100.pt, step_200.pt passed over as cut short", end, len(data), s.Best.Path, s.Passed)
			}
			continue
		}
		if !s.Found || filepath.Base(s.Best.Path) != "step_200.pt" || len(s.Passed) != 0 {
			t.Fatalf("whole: best %s, passed %+v; want step_200.pt", s.Best.Path, s.Passed)
		}
	}
}

// An atomic writer (a temp file renamed into place) is whole whenever its
// checkpoint is there; the temp file is no candidate.
func TestRenamingWriter(t *testing.T) {
	dir := t.TempDir()
	data := torchLikeZip(t, "")
	spec := Spec{Globs: []string{"step_*.pt"}, Choose: "highest_step"}
	for step := 1; step <= 3; step++ {
		tmp := write(t, filepath.Join(dir, ".tmp.pt"), data[:len(data)/2])
		write(t, tmp, data)
		final := filepath.Join(dir, "step_"+string(rune('0'+step))+".pt")
		if err := os.Rename(tmp, final); err != nil {
			t.Fatal(err)
		}
		all, _ := Scan(dir, spec, time.Now())
		Annotate(Resume{Choose: "highest_step", WritersGone: time.Now()}, all, nil)
		s := Select(Resume{Choose: "highest_step", WritersGone: time.Now()}, all)
		if !s.Found || s.Best.Path != final || len(s.Passed) != 0 {
			t.Fatalf("after step %d: %+v", step, s)
		}
	}
}

func BenchmarkCheckStructureZip(b *testing.B) {
	dir := b.TempDir()
	path := filepath.Join(dir, "m.pt")
	os.WriteFile(path, torchLikeZip(b, ""), 0o644)
	for b.Loop() {
		CheckStructure(path)
	}
}

// Annotate reads down the choice's order and stops at the first checkpoint
// it would take: one ranked below it, cut short or not, is not read.
func TestAnnotateStopsAtTheChoice(t *testing.T) {
	dir := t.TempDir()
	data := torchLikeZip(t, "")
	write(t, filepath.Join(dir, "step_1.pt"), data[:100]) // cut, but older
	write(t, filepath.Join(dir, "step_2.pt"), data)
	write(t, filepath.Join(dir, "step_3.pt"), data[:200]) // cut, the newest
	r := Resume{Choose: "highest_step", WritersGone: time.Now()}
	all, _ := Scan(dir, Spec{Globs: []string{"step_*.pt"}}, time.Now())
	Annotate(r, all, nil)
	got := map[string]Structure{}
	for _, c := range all {
		got[filepath.Base(c.Path)] = c.Structure
	}
	want := map[string]Structure{"step_3.pt": StructureTruncated, "step_2.pt": StructureComplete, "step_1.pt": StructureUnknown}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %v, want %v", k, got[k], v)
		}
	}
	s := Select(r, all)
	if filepath.Base(s.Best.Path) != "step_2.pt" || len(s.Passed) != 1 || filepath.Base(s.Passed[0].Path) != "step_3.pt" {
		t.Errorf("Select: best %s, passed %+v", s.Best.Path, s.Passed)
	}
}
