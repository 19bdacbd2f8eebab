package policy

import (
	"strings"
	"testing"
)

func TestParseNotify(t *testing.T) {
	p, err := Parse("f.yaml", []byte("version: 1\nnotify:\n  url: https://hooks.example.org/x\n  command: cat >> notes.jsonl\n"))
	if err != nil {
		t.Fatal(err)
	}
	if n := p.Notify(); n.URL != "https://hooks.example.org/x" || n.Command != "cat >> notes.jsonl" {
		t.Errorf("notify %+v", n)
	}
	p, err = Parse("f.yaml", []byte("version: 1\n"))
	if err != nil || p.Notify() != (Notify{}) {
		t.Errorf("no section: %+v %v", p.Notify(), err)
	}
	for _, tc := range []struct{ src, want string }{
		{"version: 1\nnotify:\n  url: ftp://x/y\n", `f.yaml:3:8: notify url "ftp://x/y" must be an http:// or https:// URL with a host`},
		{"version: 1\nnotify:\n  url: hooks.example.org\n", `f.yaml:3:8: notify url "hooks.example.org" must be an http:// or https:// URL with a host`},
		{"version: 1\nnotify:\n  command: ''\n", `f.yaml:3:12: notify command must not be empty`},
		{"version: 1\nnotify: {}\n", `f.yaml:2:9: notify needs url, command or both`},
		{"version: 1\nnotify:\n  urll: https://x\n", `f.yaml:3:3: notify: unknown key "urll" (did you mean "url"?); allowed: url, command`},
		{"version: 1\nnotify: https://x\n", `f.yaml:2:9: notify must be a mapping (key: value lines), not "https://x"`},
	} {
		_, err := Parse("f.yaml", []byte(tc.src))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q:\n got %v\nwant %s", tc.src, err, tc.want)
		}
	}
}
