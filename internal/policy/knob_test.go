package policy

import (
	"bytes"
	"errors"
	"io/fs"
	"maps"
	"slices"
	"strings"
	"testing"
)

// files is an in-memory file system for FileReader. It hands out its own
// slices, not copies, so a test can see if the policy ever wrote into them.
type files map[string][]byte

func (f files) read(path string) ([]byte, error) {
	if b, ok := f[path]; ok {
		return b, nil
	}
	return nil, &fs.PathError{Op: "open", Path: path, Err: fs.ErrNotExist}
}

func (f files) clone() files {
	out := files{}
	for k, v := range f {
		out[k] = bytes.Clone(v)
	}
	return out
}

func mustParse(t testing.TB, src string) *Policy {
	t.Helper()
	p, err := Parse("p.yaml", []byte(src))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return p
}

// knobPolicy is a policy with one knob k, defined by def, that a rule
// halves (so it is needed) unless def says optional.
func knobPolicy(t testing.TB, def string) *Policy {
	return mustParse(t, "version: 1\nknobs:\n  k: "+def+"\nrules:\n  - name: r\n    steps: [{halve: k}]\n")
}

// setOnlyPolicy is a policy with one knob k that a rule only sets, so its
// value need not be a number.
func setOnlyPolicy(t testing.TB, def string) *Policy {
	return mustParse(t, "version: 1\nknobs:\n  k: "+def+"\nrules:\n  - name: r\n    steps: [{set: {k: 'true'}}]\n")
}

const cfgYAML = `# model settings
MODEL:
  NAME: resnet50   # backbone
DATA:
  TRAIN_CROP: 224
  VAL_CROP_SIZE: 512
  EMPTY:
  FULL: null
`

func TestKnobForms(t *testing.T) {
	fsys := files{
		"/w/c.yaml":      []byte(cfgYAML),
		"/w/conf/c.yaml": []byte(cfgYAML),
	}
	for _, tc := range []struct {
		name     string
		def      string // knob definition
		setOnly  bool   // the policy only sets k (else it halves it)
		argv     []string
		env      []string
		start    Value  // want from Start
		unset    bool   // want no value from Start
		set      Value  // value given to Render
		wantArgv string // Render's argv, joined by spaces
		wantEnv  string // Render's env, joined by spaces
		wantFile string // derived file content, when one
		wantNote string // a substring of the notes
	}{
		{name: "flag with space", def: "{flag: [--batch-size, --bs]}", argv: []string{"py", "t.py", "--batch-size", "64", "--x"},
			start: Text("64"), set: Text("32"), wantArgv: "py t.py --batch-size 32 --x", wantNote: "k: --batch-size 64 → 32"},
		{name: "flag with equals", def: "{flag: [--batch-size, --bs]}", argv: []string{"py", "t.py", "--batch-size=64"},
			start: Text("64"), set: Text("32"), wantArgv: "py t.py --batch-size=32"},
		{name: "flag alias", def: "{flag: [--batch-size, --bs]}", argv: []string{"py", "t.py", "--bs", "64"},
			start: Text("64"), set: Text("32"), wantArgv: "py t.py --bs 32"},
		{name: "flag repeated: last wins, all rewritten", def: "{flag: --bs}", argv: []string{"py", "--bs", "8", "t.py", "--bs=64"},
			start: Text("64"), set: Text("32"), wantArgv: "py --bs 32 t.py --bs=32"},
		{name: "flag keeps exact text", def: "{flag: --lr}", argv: []string{"py", "--lr", "1e-4"},
			start: Text("1e-4"), set: Text("5e-05"), wantArgv: "py --lr 5e-05"},
		{name: "flag negative number is a value", def: "{flag: --bs}", argv: []string{"py", "--bs", "-1"},
			start: Text("-1"), set: Text("8"), wantArgv: "py --bs 8"},
		{name: "flag absent, default: unchanged command", def: "{flag: --bs, default: 64}", argv: []string{"py", "t.py"},
			start: Text("64"), set: Text("64"), wantArgv: "py t.py"},
		{name: "flag absent, default: appended when changed", def: "{flag: --bs, default: 64}", argv: []string{"py", "t.py"},
			start: Text("64"), set: Text("32"), wantArgv: "py t.py --bs 32", wantNote: "k: appended --bs 32 (the command did not set it; it was 64)"},
		{name: "flag absent, optional", def: "{flag: --bs, optional: true}", argv: []string{"py"},
			unset: true, set: Text("4"), wantArgv: "py --bs 4", wantNote: "it was unset"},
		{name: "bare switch reads true", def: "{flag: --gc, optional: true}", setOnly: true, argv: []string{"py", "--gc", "--bs", "3"},
			start: Text("true"), set: Text("false"), wantArgv: "py --gc=false --bs 3"},
		{name: "key=value", def: "{arg: batch}", argv: []string{"yolo", "train", "batch=16", "imgsz=640"},
			start: Text("16"), set: Text("8"), wantArgv: "yolo train batch=8 imgsz=640"},
		{name: "+key=value keeps its prefix", def: "{arg: trainer.accumulate_grad_batches}", argv: []string{"py", "+trainer.accumulate_grad_batches=4"},
			start: Text("4"), set: Text("8"), wantArgv: "py +trainer.accumulate_grad_batches=8"},
		{name: "++key=value", def: "{arg: data.bs}", argv: []string{"py", "++data.bs=4"},
			start: Text("4"), set: Text("2"), wantArgv: "py ++data.bs=2"},
		{name: "key=value absent, appended with add_prefix", def: "{arg: data.bs, add_prefix: '++', default: 4}", argv: []string{"py", "x=1"},
			start: Text("4"), set: Text("2"), wantArgv: "py x=1 ++data.bs=2"},
		{name: "key=value does not match a longer key", def: "{arg: bs, default: 1}", argv: []string{"py", "bs2=5", "data.bs=3"},
			start: Text("1"), set: Text("1"), wantArgv: "py bs2=5 data.bs=3"},
		{name: "env", def: "{env: VAL_CROP_SIZE}", argv: []string{"py"}, env: []string{"A=1", "VAL_CROP_SIZE=512", "B=2"},
			start: Text("512"), set: Text("256"), wantArgv: "py", wantEnv: "A=1 VAL_CROP_SIZE=256 B=2"},
		{name: "env last entry wins", def: "{env: V}", argv: []string{"py"}, env: []string{"V=1", "V=2"},
			start: Text("2"), set: Text("4"), wantArgv: "py", wantEnv: "V=4"},
		{name: "env null unsets", def: "{env: V, null_label: full}", argv: []string{"py"}, env: []string{"V=8", "B=2"},
			start: Text("8"), set: null, wantArgv: "py", wantEnv: "B=2", wantNote: "k: V=8 → full"},
		{name: "env absent, default, appended", def: "{env: V, default: 3}", argv: []string{"py"}, env: []string{"B=2"},
			start: Text("3"), set: Text("1"), wantArgv: "py", wantEnv: "B=2 V=1"},
		{name: "yaml nested key", def: "{yaml: {key: DATA.VAL_CROP_SIZE, flag: --config}}", argv: []string{"py", "--config", "c.yaml"},
			start: Text("512"), set: Text("256"), wantArgv: "py --config /run/d/c.yaml",
			wantFile: strings.Replace(cfgYAML, "VAL_CROP_SIZE: 512", "VAL_CROP_SIZE: 256", 1),
			wantNote: "config c.yaml → /run/d/c.yaml: DATA.VAL_CROP_SIZE 512 → 256"},
		{name: "yaml config by --config=", def: "{yaml: {key: DATA.TRAIN_CROP, flag: [--cfg, --config]}}", argv: []string{"py", "--config=conf/c.yaml"},
			start: Text("224"), set: Text("192"), wantArgv: "py --config=/run/d/c.yaml",
			wantFile: strings.Replace(cfgYAML, "TRAIN_CROP: 224", "TRAIN_CROP: 192", 1)},
		{name: "yaml config by key=value", def: "{yaml: {key: DATA.TRAIN_CROP, arg: cfg}}", argv: []string{"py", "cfg=/w/c.yaml"},
			start: Text("224"), set: Text("192"), wantArgv: "py cfg=/run/d/c.yaml",
			wantFile: strings.Replace(cfgYAML, "TRAIN_CROP: 224", "TRAIN_CROP: 192", 1)},
		{name: "yaml null is a value", def: "{yaml: {key: DATA.FULL, flag: --config}, null_label: full}", argv: []string{"py", "--config", "c.yaml"},
			start: null, set: Text("256"), wantArgv: "py --config /run/d/c.yaml",
			wantFile: strings.Replace(cfgYAML, "FULL: null", "FULL: 256", 1), wantNote: "DATA.FULL full → 256"},
		{name: "yaml empty value is null", def: "{yaml: {key: DATA.EMPTY, flag: --config}}", argv: []string{"py", "--config", "c.yaml"},
			start: null, set: Text("7"), wantArgv: "py --config /run/d/c.yaml",
			wantFile: strings.Replace(cfgYAML, "EMPTY:\n", "EMPTY: 7\n", 1)},
		{name: "yaml set to null", def: "{yaml: {key: DATA.VAL_CROP_SIZE, flag: --config}}", argv: []string{"py", "--config", "c.yaml"},
			start: Text("512"), set: null, wantArgv: "py --config /run/d/c.yaml",
			wantFile: strings.Replace(cfgYAML, "VAL_CROP_SIZE: 512", "VAL_CROP_SIZE: null", 1)},
		// Adding a key re-encodes the file: comments and order stay, the
		// spaces before a line comment are normalised to one.
		{name: "yaml key missing: default, then added", def: "{yaml: {key: DATA.NEW.X, flag: --config}, default: 3}", argv: []string{"py", "--config", "c.yaml"},
			start: Text("3"), set: Text("2"), wantArgv: "py --config /run/d/c.yaml",
			wantFile: strings.NewReplacer("  FULL: null\n", "  FULL: null\n  NEW:\n    X: 2\n", "resnet50   #", "resnet50 #").Replace(cfgYAML)},
		{name: "yaml unchanged: no derived file", def: "{yaml: {key: DATA.VAL_CROP_SIZE, flag: --config}}", argv: []string{"py", "--config", "c.yaml"},
			start: Text("512"), set: Text("512"), wantArgv: "py --config c.yaml"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := knobPolicy(t, tc.def)
			if tc.setOnly {
				p = setOnlyPolicy(t, tc.def)
			}
			fs0 := fsys.clone()
			job := Job{Argv: slices.Clone(tc.argv), Env: slices.Clone(tc.env), Dir: "/w"}
			vals, err := p.Start(job, fsys.read)
			if err != nil {
				t.Fatalf("Start: %v", err)
			}
			got, ok := vals["k"]
			if tc.unset {
				if ok {
					t.Errorf("Start: k = %v, want no value", got)
				}
			} else if !ok || got != tc.start {
				t.Errorf("Start: k = %#v (%v), want %#v", got, ok, tc.start)
			}
			vals["k"] = tc.set
			l, err := p.Render(job, vals, "", "/run/d", fsys.read)
			if err != nil {
				t.Fatalf("Render: %v", err)
			}
			if g := strings.Join(l.Argv, " "); g != tc.wantArgv {
				t.Errorf("Argv = %q, want %q", g, tc.wantArgv)
			}
			wantEnv := tc.wantEnv
			if wantEnv == "" {
				wantEnv = strings.Join(tc.env, " ")
			}
			if g := strings.Join(l.Env, " "); g != wantEnv {
				t.Errorf("Env = %q, want %q", g, wantEnv)
			}
			if tc.wantFile != "" {
				if len(l.Files) != 1 {
					t.Fatalf("Files = %d, want 1", len(l.Files))
				}
				if f := l.Files[0]; string(f.Data) != tc.wantFile || !strings.HasPrefix(f.Path, "/run/d/") || !strings.HasPrefix(f.Source, "/w/") {
					t.Errorf("derived file %s from %s:\n%s\nwant:\n%s", f.Path, f.Source, f.Data, tc.wantFile)
				}
			} else if len(l.Files) != 0 {
				t.Errorf("Files = %d, want none", len(l.Files))
			}
			if tc.wantNote != "" && !strings.Contains(strings.Join(l.Notes, "\n"), tc.wantNote) {
				t.Errorf("Notes %q lack %q", l.Notes, tc.wantNote)
			}
			if !slices.Equal(job.Argv, tc.argv) || !slices.Equal(job.Env, tc.env) {
				t.Errorf("Render changed the job: %v %v", job.Argv, job.Env)
			}
			if !maps.EqualFunc(fsys, fs0, bytes.Equal) {
				t.Errorf("the user's config bytes changed")
			}
		})
	}
}

func TestStartErrors(t *testing.T) {
	fsys := files{"/w/c.yaml": []byte(cfgYAML), "/w/bad.yaml": []byte("a: [\n")}
	for _, tc := range []struct {
		name string
		def  string
		argv []string
		want string
	}{
		{"flag absent, no default", "{flag: --batch-size}", []string{"py"},
			"p.yaml:3:3: knob k: rule r (halve) needs its value, but the command has no --batch-size and the knob has no default; add --batch-size N to the command, or default: (or optional: true) to the knob"},
		{"arg absent", "{arg: batch}", []string{"py"},
			"p.yaml:3:3: knob k: rule r (halve) needs its value, but the command has no batch=VALUE word and the knob has no default; add one to the command, or default: (or optional: true) to the knob"},
		{"env absent", "{env: BS}", []string{"py"},
			"p.yaml:3:3: knob k: rule r (halve) needs its value, but BS is not set and the knob has no default; export it, or add default: (or optional: true) to the knob"},
		{"not a number", "{flag: --bs}", []string{"py", "--bs", "auto"},
			`p.yaml:3:3: knob k: halve in rule r needs a number, but the value in the command is "auto"`},
		{"no config in command", "{yaml: {key: A, flag: --config}, default: 3}", []string{"py"},
			"p.yaml:3:3: knob k: rule r (halve) needs its value, but the command names no config file with --config, so its key A cannot be read or changed; add --config FILE to the command, or optional: true to the knob"},
		{"config missing", "{yaml: {key: A, flag: --config}}", []string{"py", "--config", "nope.yaml"},
			"p.yaml:3:3: knob k: reading config /w/nope.yaml (named by --config): open /w/nope.yaml: file does not exist"},
		{"config not YAML", "{yaml: {key: A, flag: --config}}", []string{"py", "--config", "bad.yaml"},
			"p.yaml:3:3: knob k: reading config /w/bad.yaml (named by --config): not valid YAML: line 1: did not find expected node content"},
		{"key path through a scalar", "{yaml: {key: MODEL.NAME.X, flag: --config}}", []string{"py", "--config", "c.yaml"},
			`p.yaml:3:3: knob k: in /w/c.yaml: MODEL.NAME is "resnet50", not a mapping, so it has no key "X"`},
		{"key is a mapping", "{yaml: {key: DATA, flag: --config}}", []string{"py", "--config", "c.yaml"},
			"p.yaml:3:3: knob k: in /w/c.yaml: DATA is a mapping; a knob must be a single value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := knobPolicy(t, tc.def)
			_, err := p.Start(Job{Argv: tc.argv, Dir: "/w"}, fsys.read)
			if err == nil || err.Error() != tc.want {
				t.Errorf("Start error:\n got: %v\nwant: %s", err, tc.want)
			}
			var pe *Error
			if err != nil && !errors.As(err, &pe) {
				t.Errorf("not a *policy.Error: %T", err)
			}
		})
	}
}

// An optional knob without a value is no error; a set-only knob needs none.
func TestStartOptionalAndSetOnly(t *testing.T) {
	p := mustParse(t, `version: 1
knobs:
  a: {flag: --a, optional: true}
  b: {flag: --b}
rules:
  - name: r
    steps: [{halve: a}, {set: {b: 1}}, {merge_env: {PYTORCH_CUDA_ALLOC_CONF: "x:1"}}]
`)
	vals, err := p.Start(Job{Argv: []string{"py"}, Env: []string{"PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:128"}}, files{}.read)
	if err != nil {
		t.Fatal(err)
	}
	want := Values{EnvKey("PYTORCH_CUDA_ALLOC_CONF"): Text("max_split_size_mb:128")}
	if !maps.Equal(vals, want) {
		t.Errorf("Start = %v, want %v", vals, want)
	}
}

func TestRenderCheckpoint(t *testing.T) {
	for _, tc := range []struct {
		pass, want, wantEnv string
		argv                []string
	}{
		{"{flag: --resume}", "py t.py --resume /c/last.ckpt", "", []string{"py", "t.py"}},
		{"{flag: --resume}", "py --resume /c/last.ckpt t.py", "", []string{"py", "--resume", "old.ckpt", "t.py"}},
		{"{flag: --resume}", "py t.py --resume=/c/last.ckpt", "", []string{"py", "t.py", "--resume"}}, // bare switch gets the path
		{"{arg: resume}", "yolo train resume=/c/last.ckpt", "", []string{"yolo", "train"}},
		{"{arg: ckpt_path, add_prefix: '++'}", "py ++ckpt_path=/c/last.ckpt", "", []string{"py"}},
		{"{arg: ckpt_path}", "py +ckpt_path=/c/last.ckpt", "", []string{"py", "+ckpt_path=x"}},
		{"{env: RESUME}", "py", "RESUME=/c/last.ckpt", []string{"py"}},
		{"{template: 'fit --ckpt_path {checkpoint}'}", "py fit --ckpt_path /c/last.ckpt", "", []string{"py"}},
	} {
		p := mustParse(t, "version: 1\ncheckpoints:\n  pass: "+tc.pass+"\n")
		l, err := p.Render(Job{Argv: tc.argv}, Values{}, "/c/last.ckpt", "/d", files{}.read)
		if err != nil {
			t.Fatal(err)
		}
		if g := strings.Join(l.Argv, " "); g != tc.want {
			t.Errorf("pass %s: argv %q, want %q", tc.pass, g, tc.want)
		}
		if g := strings.Join(l.Env, " "); g != tc.wantEnv {
			t.Errorf("pass %s: env %q, want %q", tc.pass, g, tc.wantEnv)
		}
		if len(l.Notes) != 1 || !strings.HasPrefix(l.Notes[0], "resume: ") {
			t.Errorf("pass %s: notes %q", tc.pass, l.Notes)
		}
	}
	p := mustParse(t, "version: 1\n")
	l, err := p.Render(Job{Argv: []string{"py"}}, Values{}, "/c/x", "/d", files{}.read)
	if err != nil || len(l.Argv) != 1 || !strings.Contains(strings.Join(l.Notes, ""), "checkpoint /c/x not passed") {
		t.Errorf("no pass: %v %v %v", l.Argv, l.Notes, err)
	}
}

func TestRenderEnvActions(t *testing.T) {
	p := mustParse(t, `version: 1
rules:
  - name: r
    steps: [{merge_env: {PYTORCH_CUDA_ALLOC_CONF: "expandable_segments:True"}}, {set_env: {NCCL_DEBUG: INFO}}]
`)
	job := Job{Argv: []string{"py"}, Env: []string{"PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:128", "HOME=/h"}}
	vals, err := p.Start(job, files{}.read)
	if err != nil {
		t.Fatal(err)
	}
	l, err := p.Render(job, vals, "", "/d", files{}.read)
	if err != nil || !slices.Equal(l.Env, job.Env) || len(l.Notes) != 0 {
		t.Fatalf("starting values changed the env: %v %v %v", l.Env, l.Notes, err)
	}
	vals[EnvKey("PYTORCH_CUDA_ALLOC_CONF")] = Text("max_split_size_mb:128,expandable_segments:True")
	vals[EnvKey("NCCL_DEBUG")] = Text("INFO")
	l, err = p.Render(job, vals, "", "/d", files{}.read)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:128,expandable_segments:True", "HOME=/h", "NCCL_DEBUG=INFO"}
	if !slices.Equal(l.Env, want) {
		t.Errorf("Env = %q, want %q", l.Env, want)
	}
	if !slices.Equal(l.Notes, []string{"env PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:128,expandable_segments:True (was max_split_size_mb:128)", "env NCCL_DEBUG=INFO (was unset)"}) {
		t.Errorf("Notes = %q", l.Notes)
	}
}

func TestRenderErrors(t *testing.T) {
	p := knobPolicy(t, "{yaml: {key: A, flag: --config}, optional: true}")
	// A value for a config knob whose config file is not in the command.
	_, err := p.Render(Job{Argv: []string{"py"}}, Values{"k": Text("3")}, "", "/d", files{}.read)
	if err == nil || !strings.Contains(err.Error(), "the command names no config file with --config") {
		t.Errorf("Render without config: %v", err)
	}
	// The derived copy must never land on the user's file.
	fsys := files{"/w/c.yaml": []byte("A: 1\n")}
	_, err = p.Render(Job{Argv: []string{"py", "--config", "c.yaml"}, Dir: "/w"}, Values{"k": Text("3")}, "", "/w", fsys.read)
	if err == nil || !strings.Contains(err.Error(), "would overwrite it") {
		t.Errorf("Render into the config's own directory: %v", err)
	}
}

// Two knobs in one config file make one derived file; two files with the
// same base name get distinct derived names.
func TestRenderSeveralConfigs(t *testing.T) {
	p := mustParse(t, `version: 1
knobs:
  a: {yaml: {key: A, flag: --config}}
  b: {yaml: {key: B, flag: --config}}
  c: {yaml: {key: A, flag: --data}}
`)
	fsys := files{"/w/x/c.yaml": []byte("A: 1\nB: 2\n"), "/w/y/c.yaml": []byte("A: 5\n")}
	job := Job{Argv: []string{"py", "--config", "x/c.yaml", "--data", "y/c.yaml"}, Dir: "/w"}
	vals, err := p.Start(job, fsys.read)
	if err != nil {
		t.Fatal(err)
	}
	vals["a"], vals["b"], vals["c"] = Text("10"), Text("20"), Text("50")
	l, err := p.Render(job, vals, "", "/d", fsys.read)
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Files) != 2 || string(l.Files[0].Data) != "A: 10\nB: 20\n" || string(l.Files[1].Data) != "A: 50\n" ||
		l.Files[0].Path != "/d/c.yaml" || l.Files[1].Path != "/d/2-c.yaml" {
		t.Fatalf("Files = %+v", l.Files)
	}
	if g := strings.Join(l.Argv, " "); g != "py --config /d/c.yaml --data /d/2-c.yaml" {
		t.Errorf("Argv = %q", g)
	}
}

// An allocator option merged into PYTORCH_CUDA_ALLOC_CONF is copied to the
// other allocator variables the user set (PyTorch 2.9+ reads
// PYTORCH_ALLOC_CONF first), and a malformed one is left as written.
func TestRenderAllocatorSiblings(t *testing.T) {
	p := mustParse(t, `version: 1
rules:
  - name: r
    steps: [{merge_env: {PYTORCH_CUDA_ALLOC_CONF: "expandable_segments:True"}}]
`)
	for _, tc := range []struct {
		name      string
		env, want []string
		note      string
	}{
		{"generic variable set", []string{"PYTORCH_ALLOC_CONF=max_split_size_mb:64", "HOME=/h"},
			[]string{"PYTORCH_ALLOC_CONF=max_split_size_mb:64,expandable_segments:True", "HOME=/h", "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"},
			"env PYTORCH_ALLOC_CONF: added expandable_segments:True (kept in step with PYTORCH_CUDA_ALLOC_CONF)"},
		{"generic variable overridden", []string{"PYTORCH_ALLOC_CONF=expandable_segments:False", "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:False"},
			[]string{"PYTORCH_ALLOC_CONF=expandable_segments:True", "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"},
			"env PYTORCH_ALLOC_CONF: expandable_segments False→True (kept in step with PYTORCH_CUDA_ALLOC_CONF)"},
		{"malformed sibling left alone", []string{"PYTORCH_ALLOC_CONF=oops"},
			[]string{"PYTORCH_ALLOC_CONF=oops", "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"},
			`PYTORCH_ALLOC_CONF="oops" is malformed`},
		{"no sibling", []string{"HOME=/h"}, []string{"HOME=/h", "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"}, "env PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (was unset)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := Job{Argv: []string{"py"}, Env: tc.env}
			vals, err := p.Start(job, files{}.read)
			if err != nil {
				t.Fatal(err)
			}
			d := p.Decide(NewState(vals), oom("train"))
			if d.Verb != Relaunch {
				t.Fatalf("%s", d.Describe())
			}
			l, err := p.Render(job, d.State.Values, "", "/d", files{}.read)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(l.Env, tc.want) {
				t.Errorf("Env = %q\nwant %q", l.Env, tc.want)
			}
			if !strings.Contains(strings.Join(l.Notes, "\n"), tc.note) {
				t.Errorf("Notes %q lack %q", l.Notes, tc.note)
			}
		})
	}
}

// The memo keys a command without the arguments that pass a checkpoint, in
// each way checkpoints.pass adds them.
func TestWithoutResume(t *testing.T) {
	for _, tc := range []struct{ pass, argv, want string }{
		{"{flag: --resume}", "python train.py --bs 8 --resume out/step_4.pt", "python train.py --bs 8"},
		{"{flag: --resume}", "python train.py --resume=out/step_4.pt --bs 8", "python train.py --bs 8"},
		{"{arg: ckpt_path}", "python train.py +ckpt_path=x.ckpt trainer.max_epochs=3", "python train.py trainer.max_epochs=3"},
		{"{template: \"fit --ckpt_path {checkpoint}\"}", "python main.py fit --ckpt_path a/b.ckpt --bs 2", "python main.py --bs 2"},
		{"{template: \"fit --ckpt_path {checkpoint}\"}", "python main.py fit --bs 2", "python main.py fit --bs 2"},
		{"{env: RESUME_FROM}", "python train.py --resume x", "python train.py --resume x"},
	} {
		src := "version: 1\ncheckpoints:\n  globs: [out/*.pt]\n  pass: " + tc.pass + "\n"
		p, err := Parse("p.yaml", []byte(src))
		if err != nil {
			t.Fatalf("%s: %v", tc.pass, err)
		}
		if got := strings.Join(p.WithoutResume(strings.Fields(tc.argv)), " "); got != tc.want {
			t.Errorf("%s: WithoutResume(%q) = %q, want %q", tc.pass, tc.argv, got, tc.want)
		}
	}
}
