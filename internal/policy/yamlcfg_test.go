package policy

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
)

func TestDeriveConfigInPlace(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		edits     []configEdit
		want      string
	}{
		{"comments, order, indentation and blank lines kept",
			"# top comment\nb: 1   # trailing\n\na:\n    x: 2  # four-space indent\n    y: [1, 2]\n",
			[]configEdit{{[]string{"a", "x"}, Text("3")}, {[]string{"b"}, Text("10")}},
			"# top comment\nb: 10   # trailing\n\na:\n    x: 3  # four-space indent\n    y: [1, 2]\n"},
		{"double quotes kept, so a string stays a string",
			"name: \"run-1\"\nbs: \"64\"\n", []configEdit{{[]string{"bs"}, Text("32")}}, "name: \"run-1\"\nbs: \"32\"\n"},
		{"single quotes with escape", "a: 'it''s'  # c\n", []configEdit{{[]string{"a"}, Text("b's")}}, "a: 'b''s'  # c\n"},
		{"value needing quotes gets them", "a: x\n", []configEdit{{[]string{"a"}, Text("k: v")}}, "a: 'k: v'\n"},
		{"flow mapping", "d: {h: 3, i: [1, 2]}\n", []configEdit{{[]string{"d", "h"}, Text("4")}, {[]string{"d", "i", "1"}, Text("5")}}, "d: {h: 4, i: [1, 5]}\n"},
		{"non-ASCII before the value", "é: {ü: 1, ß: 2}\n", []configEdit{{[]string{"é", "ß"}, Text("7")}}, "é: {ü: 1, ß: 7}\n"},
		{"sequence index", "l:\n  - 1\n  - 2  # two\n", []configEdit{{[]string{"l", "1"}, Text("9")}}, "l:\n  - 1\n  - 9  # two\n"},
		{"null forms", "a: ~\nb:\nc: Null\n", []configEdit{{[]string{"a"}, Text("1")}, {[]string{"b"}, Text("2")}, {[]string{"c"}, Text("3")}}, "a: 1\nb: 2\nc: 3\n"},
		{"empty value before a comment", "a:   # full resolution\nb: 1\n", []configEdit{{[]string{"a"}, Text("256")}}, "a: 256   # full resolution\nb: 1\n"},
		{"CRLF line ends kept", "a: 1\r\nb: 2\r\n", []configEdit{{[]string{"b"}, Text("3")}}, "a: 1\r\nb: 3\r\n"},
		{"second document untouched", "a: 1\n---\na: 1\n", []configEdit{{[]string{"a"}, Text("2")}}, "a: 2\n---\na: 1\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := []byte(tc.src)
			keep := bytes.Clone(src)
			got, _, err := deriveConfig(src, tc.edits, nil)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("got:\n%q\nwant:\n%q", got, tc.want)
			}
			if !bytes.Equal(src, keep) {
				t.Errorf("deriveConfig changed its input")
			}
			// The copy reads back with the new values.
			d, err := parseConfig(got)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range tc.edits {
				if v, ok, err := d.value(e.path); err != nil || !ok || v != e.value {
					t.Errorf("%s reads back as %v (%v, %v), want %v", joinKey(e.path), v, ok, err, e.value)
				}
			}
		})
	}
}

// When a value cannot be replaced in place the file is re-encoded from its
// node tree: values, comments and key order survive.
func TestDeriveConfigReencoded(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		edits     []configEdit
		want      string
	}{
		{"block scalar", "# head\nb: |\n  text\na: 1 # c\n", []configEdit{{[]string{"b"}, Text("x")}}, "# head\nb: x\na: 1 # c\n"},
		{"alias replaced, anchor kept", "base: &s 5\nuse: *s\n", []configEdit{{[]string{"use"}, Text("6")}}, "base: &s 5\nuse: 6\n"},
		{"new key under existing mapping, 4-space indent", "# c\nm:\n    a: 1\n", []configEdit{{[]string{"m", "b"}, Text("2")}}, "# c\nm:\n    a: 1\n    b: 2\n"},
		{"empty file", "", []configEdit{{[]string{"a", "b"}, Text("1")}}, "a:\n  b: 1\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, _, err := deriveConfig([]byte(tc.src), tc.edits, nil)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("got:\n%s\nwant:\n%s", got, tc.want)
			}
		})
	}
	for _, tc := range []struct {
		name, src string
		path      string
		want      string
	}{
		{"add to multi-document", "a: 1\n---\nb: 2\n", "c", "several YAML documents"},
		{"through a scalar", "a: 1\n", "a.b", `a is "1", not a mapping, so it has no key "b"`},
		{"bad index", "l: [1]\n", "l.x", `l is a list; "x" is not an index`},
		{"not YAML", "a: [\n", "a", "not valid YAML"},
	} {
		_, _, err := deriveConfig([]byte(tc.src), []configEdit{{strings.Split(tc.path, "."), Text("1")}}, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.want)
		}
	}
}

// The rule for relative paths inside a derived copy (docs/policy.md).
func TestRelocate(t *testing.T) {
	exists := map[string]bool{
		"/w/configs/base.yaml":   true, // beside the config only
		"/w/configs/shared.yaml": true, // beside the config and in the working directory
		"/w/shared.yaml":         true,
		"/w/data/train":          true, // in the working directory only
		"/w/local.txt":           true,
	}
	has := func(p string) bool { return exists[filepath.Clean(p)] }
	src := `_BASE_: base.yaml
shared: shared.yaml
data: data/train
model: facebook/opt-1.3b
url: https://x/y
abs: /etc/hosts
list: ["base.yaml", other]
n: 5
`
	got, moved, err := deriveConfig([]byte(src), nil, relocator("/w/configs", "/w", has))
	if err != nil {
		t.Fatal(err)
	}
	want := strings.NewReplacer("_BASE_: base.yaml", "_BASE_: /w/configs/base.yaml", `["base.yaml"`, `["/w/configs/base.yaml"`).Replace(src)
	if string(got) != want || moved != 2 {
		t.Errorf("config in a subdirectory: moved %d\n%s\nwant\n%s", moved, got, want)
	}
	// A config in the working directory: both readings agree, so every
	// relative string naming something that exists is made absolute.
	got, moved, err = deriveConfig([]byte("a: local.txt\nb: data/train\nc: nothing\n"), nil, relocator("/w", "/w", has))
	if err != nil || string(got) != "a: /w/local.txt\nb: /w/data/train\nc: nothing\n" || moved != 2 {
		t.Errorf("config in the working directory: %q %d %v", got, moved, err)
	}
	if relocator("/w", "/w", nil) != nil || relocator("rel", "/w", has) != nil {
		t.Errorf("relocator must be off without Exists or with relative directories")
	}
}

// Render relocates through Job.Exists and says so.
func TestRenderRelocates(t *testing.T) {
	p := mustParse(t, "version: 1\nknobs:\n  k: {yaml: {key: bs, flag: --config}}\n")
	fsys := files{"/w/configs/c.yaml": []byte("_BASE_: base.yaml\nbs: 8\n")}
	job := Job{Argv: []string{"py", "--config", "configs/c.yaml"}, Dir: "/w", Exists: func(p string) bool { return p == "/w/configs/base.yaml" }}
	l, err := p.Render(job, Values{"k": Text("4")}, "", "/run/1", fsys.read)
	if err != nil {
		t.Fatal(err)
	}
	if string(l.Files[0].Data) != "_BASE_: /w/configs/base.yaml\nbs: 4\n" {
		t.Errorf("derived: %s", l.Files[0].Data)
	}
	if !strings.Contains(l.Notes[0], "1 relative path(s) naming files beside the original made absolute") {
		t.Errorf("notes: %q", l.Notes)
	}
}
