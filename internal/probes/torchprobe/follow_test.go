package torchprobe

import (
	"os"
	"path/filepath"
	"testing"
)

// A line is read once, and only when complete.
func TestFollowerPartialLines(t *testing.T) {
	dir := t.TempDir()
	name := filepath.Join(dir, "probe-7.jsonl")
	f, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fl := NewFollower(dir)
	var got []Record
	poll := func() { fl.Poll(func(r Record) { got = append(got, r) }) }
	f.WriteString(`{"t":"start","pid":7}` + "\n" + `{"t":"phase","pid":7,"pha`)
	poll()
	if len(got) != 1 || got[0].Kind != KindStart {
		t.Fatalf("got %+v", got)
	}
	f.WriteString(`se":"val","rank":0}` + "\nnot json\n")
	poll()
	poll()
	if len(got) != 2 || got[1].Phase != "val" || !got[1].MainRank() {
		t.Fatalf("got %+v", got)
	}
}

func TestEnv(t *testing.T) {
	env := Env([]string{"A=1"}, "/s", "/r")
	if len(env) != 3 || env[1] != "PYTHONPATH=/s" || env[2] != EnvDir+"=/r" {
		t.Fatalf("%q", env)
	}
	env = Env([]string{"PYTHONPATH=/u"}, "/s", "/r")
	if env[0] != "PYTHONPATH=/s:/u" {
		t.Fatalf("%q", env)
	}
}
