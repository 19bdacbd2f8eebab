package cli

import (
	"path/filepath"
	"regexp"
	"strings"

	"github.com/gpuguard/gpuguard/internal/policy"
	"github.com/gpuguard/gpuguard/internal/supervisor"
)

// Checkpoint globs for `gpuguard policy init` and `gpuguard policy check`.
//
// A preset's globs name where its framework saves by default; a command
// that names its own output directory saves somewhere else, and a relaunch
// then finds nothing to resume from. So policy init reads the command's
// output-directory flags and writes globs under that directory, in the
// layout the framework that owns the flag saves in.

// outDirFlag is a flag (or key=value key) that names where a job saves, and
// the globs of what it saves there, relative to that directory.
type outDirFlag struct {
	names []string // as typed: "--output_dir", "hydra.run.dir"
	globs []string
	what  string // who saves what, for the comment
}

// outDirFlags, most specific first. The layouts, from each framework's
// source: Hugging Face's Trainer saves checkpoint-STEP/ directories under
// --output_dir; Lightning saves lightning_logs/version_N/checkpoints/*.ckpt
// under trainer.default_root_dir; torchtitan saves step-N/ under
// checkpoint.folder ("checkpoint") in --job.dump_folder; nanoGPT saves
// ckpt.pt in --out_dir; Megatron-LM saves iter_NNNNNNN/ under --save;
// mmengine's CheckpointHook saves epoch_N.pth / iter_N.pth in --work-dir;
// Hydra runs a job in hydra.run.dir, where the Lightning-Hydra template
// saves checkpoints/*.ckpt. The generic flags get PyTorch's usual files.
var outDirFlags = []outDirFlag{
	{[]string{"--trainer.default_root_dir", "trainer.default_root_dir", "+trainer.default_root_dir", "++trainer.default_root_dir"},
		[]string{"lightning_logs/version_*/checkpoints/*.ckpt", "checkpoints/*.ckpt"}, "Lightning's ModelCheckpoint"},
	{[]string{"--job.dump_folder"}, []string{"checkpoint/step-*"}, "torchtitan's checkpointer"},
	{[]string{"hydra.run.dir", "+hydra.run.dir", "++hydra.run.dir"}, []string{"checkpoints/*.ckpt", "*.pt"}, "a Hydra job's run directory"},
	{[]string{"--save"}, []string{"iter_*"}, "Megatron-LM"},
	{[]string{"--work-dir", "--work_dir"}, []string{"epoch_*.pth", "iter_*.pth"}, "mmengine's CheckpointHook"},
	{[]string{"--out_dir", "--out-dir"}, []string{"ckpt.pt", "*.pt"}, "nanoGPT-style scripts"},
	{[]string{"--output_dir", "--output-dir", "--save_dir", "--save-dir", "--checkpoint_dir", "--checkpoint-dir",
		"--checkpoints_dir", "--ckpt_dir", "--ckpt-dir", "--save_path", "--save-path"},
		[]string{"checkpoint-*", "*.pt", "*.pth", "*.ckpt", "*/*.pt"}, "the command's output directory"},
}

// guessedGlobs are checkpoint globs for the output directory argv names, and
// the words it was read from; none when argv names none. Hugging Face's
// --output_dir gets checkpoint-*/ only.
func guessedGlobs(argv []string) (globs []string, from string) {
	for _, f := range outDirFlags {
		for _, name := range f.names {
			dir, ok := flagValue(argv, name)
			if !ok || dir == "" {
				continue
			}
			for _, g := range f.globs {
				if name == "--output_dir" && hfCommand(argv) && g != "checkpoint-*" {
					continue
				}
				globs = append(globs, filepath.ToSlash(filepath.Join(escapeGlobDir(dir), g)))
			}
			sep := " "
			if !strings.HasPrefix(name, "-") {
				sep = "="
			}
			return globs, name + sep + dir + " (" + f.what + ")"
		}
	}
	return nil, ""
}

// hfCommand: the command has other TrainingArguments flags.
func hfCommand(argv []string) bool {
	for _, w := range argv {
		for _, f := range []string{"--per_device_train_batch_size", "--model_name_or_path", "--gradient_accumulation_steps"} {
			if w == f || strings.HasPrefix(w, f+"=") {
				return true
			}
		}
	}
	return false
}

// flagValue is the value argv gives name: "--name VALUE", "--name=VALUE",
// or for a key without dashes "name=VALUE"; the last one wins.
func flagValue(argv []string, name string) (string, bool) {
	val, found := "", false
	for i := 1; i < len(argv); i++ {
		w := argv[i]
		switch {
		case strings.HasPrefix(name, "-") && w == name && i+1 < len(argv) && !strings.HasPrefix(argv[i+1], "-"):
			val, found = argv[i+1], true
			i++
		case strings.HasPrefix(w, name+"="):
			val, found = w[len(name)+1:], true
		}
	}
	return val, found
}

var globMeta = regexp.MustCompile(`[*?\[\\]`)

// escapeGlobDir escapes glob characters in a directory name (Hydra's
// ${now:...} holds none, but a user's may).
func escapeGlobDir(dir string) string {
	return globMeta.ReplaceAllStringFunc(dir, func(m string) string { return `\` + m })
}

// withGuessedGlobs rewrites the globs line of the checkpoints section of a
// preset's text with globs, saying where they came from and what the
// preset had. A preset whose globs already follow a knob ({output_dir})
// is left as it is.
func withGuessedGlobs(data []byte, globs []string, from string) ([]byte, bool) {
	lines := strings.Split(string(data), "\n")
	inCkpt := false
	for i, line := range lines {
		switch {
		case strings.HasPrefix(line, "checkpoints:"):
			inCkpt = true
		case inCkpt && len(line) > 0 && line[0] != ' ' && line[0] != '#':
			inCkpt = false
		case inCkpt && strings.HasPrefix(strings.TrimSpace(line), "globs:"):
			if strings.Contains(line, "{") {
				return data, false
			}
			indent := line[:len(line)-len(strings.TrimLeft(line, " "))]
			quoted := make([]string, len(globs))
			for j, g := range globs {
				quoted[j] = `"` + strings.ReplaceAll(g, `\`, `\\`) + `"`
			}
			lines[i] = indent + "# guessed from " + from + "; the preset had: " + strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "globs:")) + "\n" +
				indent + "globs: [" + strings.Join(quoted, ", ") + "]"
			return []byte(strings.Join(lines, "\n")), true
		}
	}
	return data, false
}

// unmatchedGlobWarnings are `policy check`'s warnings for p's checkpoint
// globs that match nothing in dir now (the dry run's, from the same code).
// A glob with a {knob} depends on the command and is left to --dry-run.
func unmatchedGlobWarnings(p *policy.Policy, dir string) []string {
	var plain, knobbed []string
	for _, g := range p.Checkpoint().Globs {
		if strings.Contains(g, "{") {
			knobbed = append(knobbed, g)
		} else {
			plain = append(plain, g)
		}
	}
	var out []string
	if g := supervisor.UnmatchedGlobs(plain, dir); len(g) > 0 && len(knobbed) == 0 {
		out = append(out, supervisor.UnmatchedGlobWarning(g))
	}
	for _, g := range knobbed {
		out = append(out, "note: checkpoint glob "+g+" depends on the command's knobs: gpuguard run --dry-run -- COMMAND checks it")
	}
	return out
}
