package reliability

import (
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/gpuguard/gpuguard/internal/policy"
)

// A knob whose value in the user's YAML config is empty but anchored
// ("crop: &c", YAML null with an anchor) is written into the derived copy
// so that it reads back as the new value. Found by FuzzDeriveConfig (input
// kept in internal/policy/testdata/fuzz/FuzzDeriveConfig): the copy said "crop: 512 &c",
// which YAML reads as the string "512 &c". See docs/reliability.md,
// finding 1.
func TestDerivedConfigAnchoredEmptyValue(t *testing.T) {
	pol, err := policy.Parse("policy.yaml", []byte(`version: 1
knobs:
  crop:
    yaml: {flag: --config, key: crop}
    optional: true
rules:
  - name: r
    when: {kind: gpu_oom}
    steps:
      - set: {crop: 512}
`))
	if err != nil {
		t.Fatal(err)
	}
	cfg := []byte("crop: &c\nother: *c\n")
	job := policy.Job{Argv: []string{"train", "--config", "/cfg.yaml"}, Dir: "/"}
	read := func(string) ([]byte, error) { return cfg, nil }
	vals, err := pol.Start(job, read)
	if err != nil {
		t.Fatal(err)
	}
	vals["crop"] = policy.Text("512")
	l, err := pol.Render(job, vals, "", t.TempDir(), read)
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Files) != 1 {
		t.Fatalf("derived files: %d, want 1", len(l.Files))
	}
	var got map[string]any
	if err := yaml.Unmarshal(l.Files[0].Data, &got); err != nil {
		t.Fatalf("derived config %q does not parse: %v", l.Files[0].Data, err)
	}
	if got["crop"] != 512 {
		t.Errorf("derived config %q: crop reads back as %#v, want 512", l.Files[0].Data, got["crop"])
	}
}
