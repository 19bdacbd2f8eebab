package presets

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpuguard/gpuguard/internal/policy"
	"github.com/gpuguard/gpuguard/internal/probes/classify"
)

var allPresets = []string{"argparse", "huggingface", "hydra", "lightning", "ultralytics"}

func TestNamesAndLookup(t *testing.T) {
	if got := Names(); !slices.Equal(got, allPresets) {
		t.Errorf("Names() = %v, want %v", got, allPresets)
	}
	for _, bad := range []string{"", "nope", "../policies/argparse", "argparse.yaml", "commands.go"} {
		if _, ok := Lookup(bad); ok {
			t.Errorf("Lookup(%q) found something", bad)
		}
	}
}

// presetCase is a command a preset is meant for, the knob holding its
// training batch, and the knob whose value a validation OOM must leave
// alone.
var presetCases = []struct {
	preset, batchKnob string
	argv              []string
}{
	{"argparse", "batch_size", []string{"python", "train.py", "--batch-size", "64", "--grad-accum", "1", "--val-batch-size", "32", "--num-workers", "8"}},
	{"lightning", "batch_size", []string{"python", "main.py", "fit", "--config", "c.yaml", "--data.batch_size", "64", "--data.num_workers", "8"}},
	{"huggingface", "batch_size", []string{"torchrun", "--nproc_per_node", "2", "run_clm.py", "--model_name_or_path", "gpt2", "--output_dir", "out", "--per_device_train_batch_size", "16"}},
	{"ultralytics", "batch", []string{"yolo", "train", "model=yolo11n.pt", "data=coco8.yaml", "batch=32", "workers=8"}},
	{"hydra", "batch_size", []string{"python", "src/train.py", "data.batch_size=64", "trainer=gpu"}},
}

// startPreset reads a preset and the knob values it finds in argv, as a run
// of argv with it would start.
func startPreset(t *testing.T, preset string, argv []string) (*policy.Policy, policy.Job, policy.Values) {
	t.Helper()
	filename, data, err := Load(preset, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	p, err := policy.Parse(filename, data)
	if err != nil {
		t.Fatal(err)
	}
	job := policy.Job{Argv: argv, Dir: "/w"}
	vals, err := p.Start(job, os.ReadFile)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	return p, job, vals
}

// Run each preset against its typical command: the knobs can be read, a
// fragmentation OOM first changes the allocator, a validation OOM never
// changes the training batch (Ultralytics, whose validation batch is
// derived from it, is the documented exception), and repeated training
// OOMs end with the batch smaller and the run given up.
func TestPresetsBehave(t *testing.T) {
	for _, tc := range presetCases {
		t.Run(tc.preset, func(t *testing.T) {
			p, job, vals := startPreset(t, tc.preset, tc.argv)
			start := vals[tc.batchKnob]
			l, err := p.Render(job, vals, "", "/d", os.ReadFile)
			if err != nil || !slices.Equal(l.Argv, tc.argv) {
				t.Errorf("first attempt must run the command as given: %v %v", l.Argv, err)
			}

			frag := outcome(classify.PhaseTrain)
			frag.Verdict.Fragmentation = true
			d := p.Decide(policy.NewState(vals), frag)
			if d.Verb != policy.Relaunch || d.Rule != "fragmentation" || d.Changes[0].Env != "PYTORCH_CUDA_ALLOC_CONF" {
				t.Errorf("fragmentation: %s", d.Describe())
			}

			st := policy.NewState(vals)
			for i := 1; i <= 10; i++ {
				o := outcome(classify.PhaseVal)
				o.Attempt = i
				d := p.Decide(st, o)
				if d.Verb != policy.Relaunch {
					break
				}
				st = d.State
				if tc.preset != "ultralytics" && st.Values[tc.batchKnob] != start {
					t.Fatalf("validation OOM changed the training batch: %s", d.Describe())
				}
			}

			st = policy.NewState(vals)
			var last policy.Decision
			for i := 1; i <= 12; i++ {
				o := outcome(classify.PhaseTrain)
				o.Attempt = i
				last = p.Decide(st, o)
				if last.Verb != policy.Relaunch {
					break
				}
				st = last.State
				l, err := p.Render(job, st.Values, "/ck/last", "/d", os.ReadFile)
				if err != nil {
					t.Fatalf("Render after %s: %v", last.Describe(), err)
				}
				if !slices.ContainsFunc(l.Notes, func(n string) bool { return strings.HasPrefix(n, "resume: ") }) {
					t.Errorf("relaunch does not resume from the checkpoint: %q", l.Notes)
				}
			}
			if last.Verb != policy.GiveUp {
				t.Errorf("training OOMs never gave up: %s", last.Describe())
			}
			if st.Values[tc.batchKnob] == start {
				t.Errorf("training OOMs never reduced %s from %s", tc.batchKnob, start)
			}
		})
	}
}

func outcome(phase classify.Phase) policy.Outcome {
	return policy.Outcome{Attempt: 1, Exit: classify.Exit{Code: 1}, Verdict: classify.Verdict{Kind: classify.KindGPUOOM, Phase: phase}, Rand: 0.5}
}

func write(t *testing.T, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestLoadDiscovery(t *testing.T) {
	root := t.TempDir()
	repo := filepath.Join(root, "repo")
	deep := filepath.Join(repo, "a", "b", "c")
	if err := os.MkdirAll(filepath.Join(repo, ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(deep, 0o755); err != nil {
		t.Fatal(err)
	}
	// Above the repository root: never found from inside it.
	write(t, filepath.Join(root, "gpuguard.yaml"), "version: 1 # outside\n")

	check := func(workDir, wantFile, wantData string) {
		t.Helper()
		f, data, err := Load("", workDir)
		if err != nil || f != wantFile || string(data) != wantData {
			t.Errorf("Load(\"\", %s) = %q %q %v; want %q %q", workDir, f, data, err, wantFile, wantData)
		}
	}
	check(deep, "", "")
	write(t, filepath.Join(repo, "gpuguard.yaml"), "version: 1 # root\n")
	check(deep, filepath.Join(repo, "gpuguard.yaml"), "version: 1 # root\n")
	write(t, filepath.Join(repo, "a", "gpuguard.yml"), "version: 1 # a\n")
	check(deep, filepath.Join(repo, "a", "gpuguard.yml"), "version: 1 # a\n") // the nearest wins
	write(t, filepath.Join(repo, "a", "gpuguard.yaml"), "version: 1 # a yaml\n")
	check(deep, filepath.Join(repo, "a", "gpuguard.yaml"), "version: 1 # a yaml\n") // .yaml before .yml

	// Outside a repository only the working directory is searched.
	loose := filepath.Join(root, "loose", "sub")
	if err := os.MkdirAll(loose, 0o755); err != nil {
		t.Fatal(err)
	}
	check(loose, "", "")
	write(t, filepath.Join(loose, "gpuguard.yaml"), "version: 1 # loose\n")
	check(loose, filepath.Join(loose, "gpuguard.yaml"), "version: 1 # loose\n")

	// A worktree's .git is a file.
	wt := filepath.Join(root, "wt")
	write(t, filepath.Join(wt, ".git"), "gitdir: /elsewhere\n")
	write(t, filepath.Join(wt, "gpuguard.yaml"), "version: 1 # wt\n")
	check(filepath.Join(wt, "x"), filepath.Join(wt, "gpuguard.yaml"), "version: 1 # wt\n")
}

func TestLoadNames(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "conf", "p.yaml"), "version: 1\n")
	write(t, filepath.Join(dir, "mypolicy"), "version: 1 # plain name\n")
	write(t, filepath.Join(dir, "lightning"), "version: 1 # shadowed\n")
	for _, tc := range []struct {
		arg, wantFile, wantErr string
	}{
		{"lightning", "preset:lightning", ""}, // a preset name beats a file of that name
		{"./lightning", filepath.Join(dir, "lightning"), ""},
		{"conf/p.yaml", filepath.Join(dir, "conf", "p.yaml"), ""},
		{filepath.Join(dir, "conf", "p.yaml"), filepath.Join(dir, "conf", "p.yaml"), ""},
		{"mypolicy", filepath.Join(dir, "mypolicy"), ""},
		{"lightnin", "", `no policy file "lightnin" and no built-in preset by that name (did you mean "lightning"?); presets: argparse, huggingface, hydra, lightning, ultralytics`},
		{"missing.yaml", "", "reading policy file: open " + filepath.Join(dir, "missing.yaml") + ": no such file or directory"},
	} {
		f, _, err := Load(tc.arg, dir)
		if tc.wantErr != "" {
			if err == nil || err.Error() != tc.wantErr {
				t.Errorf("Load(%q) error %v, want %q", tc.arg, err, tc.wantErr)
			}
			continue
		}
		if err != nil || f != tc.wantFile {
			t.Errorf("Load(%q) = %q, %v; want %q", tc.arg, f, err, tc.wantFile)
		}
	}
}

func TestGuess(t *testing.T) {
	for _, tc := range []struct {
		argv string
		want string
	}{
		{"python train.py --batch-size 64", "argparse"},
		{"python train.py", "argparse"},
		{"yolo train model=yolo11n.pt batch=16", "ultralytics"},
		{"python -m ultralytics train", "ultralytics"},
		{"python fit.py batch=16 imgsz=640", "ultralytics"},
		{"python main.py fit --trainer.max_epochs=3 --data.batch_size 8", "lightning"},
		{"accelerate launch run_glue.py --model_name_or_path bert --output_dir o", "huggingface"},
		{"python train.py --output_dir runs/exp1 --batch-size 32", "argparse"},
		{"torchrun --nproc_per_node 8 train.py --per_device_train_batch_size=8", "huggingface"},
		{"python src/train.py trainer.max_epochs=10 data.batch_size=64", "hydra"},
		{"python train.py +experiment=big", "hydra"},
		{"python train.py lr=0.1", "hydra"},
	} {
		if got, why := Guess(strings.Fields(tc.argv)); got != tc.want || why == "" {
			t.Errorf("Guess(%s) = %s (%s), want %s", tc.argv, got, why, tc.want)
		}
	}
}
