package policy

import (
	"strings"
	"testing"

	"github.com/gpuguard/gpuguard/internal/probes/classify"
)

// FuzzParse: any input either fails with located errors or yields a policy
// whose methods do not panic.
func FuzzParse(f *testing.F) {
	f.Add([]byte(fullPolicy))
	f.Add([]byte(matchPolicy))
	f.Add([]byte("version: 1\nknobs: {a: {flag: --a}}\nrules: [{name: r, steps: [{halve: a}]}]\n"))
	f.Add([]byte("version: 1\nrules: [{steps: [{do: [{retry: true}]}]}]\n"))
	f.Add([]byte("a: &x [*x]\n"))
	f.Add([]byte("version: 1\nknobs: &k {a: *k}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse("fuzz.yaml", data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz.yaml") {
				t.Fatalf("error without the file name: %v", err)
			}
			return
		}
		job := Job{Argv: []string{"py", "--a", "4", "--config", "c.yaml"}, Env: []string{"A=1"}, Dir: "/w"}
		read := files{"/w/c.yaml": []byte("a: 1\nb: {c: 2}\n")}.read
		vals, err := p.Start(job, read)
		if err != nil {
			vals = Values{}
		}
		st := NewState(vals)
		for i := 1; i <= 3; i++ {
			d := p.Decide(st, Outcome{Attempt: i, Exit: classify.Exit{Code: 1}, Verdict: classify.Verdict{Kind: classify.KindGPUOOM, Phase: classify.PhaseTrain}, Rand: 0.3})
			_ = d.Describe()
			st = d.State
		}
		_, _ = p.Render(job, st.Values, "/ck", "/d", read)
		_ = p.Preview(vals)
		_, _ = p.Checkpoint().Expand(vals)
	})
}

// FuzzDeriveConfig: the derived-config writer never panics, never changes
// its input, and what it writes reads back with the edited value.
func FuzzDeriveConfig(f *testing.F) {
	f.Add([]byte(cfgYAML), "DATA.VAL_CROP_SIZE", "256")
	f.Add([]byte("a:\n  - {b: 'x'}\n"), "a.0.b", "y z")
	f.Add([]byte("a: |\n  x\n"), "a", "1")
	f.Add([]byte("a: &x 1\nb: *x\n"), "b", "null")
	f.Add([]byte("é: \"ü\\\"\"\n"), "é", "\"")
	f.Add([]byte(""), "n.m", "3")
	f.Fuzz(func(t *testing.T, src []byte, key, value string) {
		if key == "" || strings.Contains(key, "..") || strings.HasPrefix(key, ".") || strings.HasSuffix(key, ".") {
			return
		}
		keep := string(src)
		v := Text(value)
		if value == "null" {
			v = null
		}
		path := strings.Split(key, ".")
		out, _, err := deriveConfig(src, []configEdit{{path, v}}, func(s string) (string, bool) { return "/abs/" + s, len(s) == 3 })
		if string(src) != keep {
			t.Fatalf("input changed")
		}
		if err != nil {
			return
		}
		d, err := parseConfig(out)
		if err != nil {
			t.Fatalf("derived config does not parse: %v\nsource %q\nderived %q", err, src, out)
		}
		got, ok, err := d.value(path)
		if err != nil || !ok {
			t.Fatalf("edited key unreadable: %v %v\nsource %q\nderived %q", ok, err, src, out)
		}
		// Text that YAML reads as null ("~", "Null") is written as it is.
		nullText := got.Null && (v.Text == "~" || strings.EqualFold(v.Text, "null"))
		if got != v && !nullText && !strings.HasPrefix(got.Text, "/abs/") {
			t.Fatalf("value %#v reads back as %#v\nsource %q\nderived %q", v, got, src, out)
		}
	})
}
