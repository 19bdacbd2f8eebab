package presets

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gpuguard/gpuguard/internal/policy"
)

// Exit statuses of the policy commands (the same values as the
// supervisor's table, which this package cannot import: the supervisor
// imports it).
const (
	exitOK     = 0
	exitUsage  = 64
	exitConfig = 78
)

// Check validates a policy file (or preset name) and returns an exit status:
// 0 when valid, with a one-paragraph summary on stdout; 78 with every
// problem as "file:line:col: message" on stderr when not, or when the file
// cannot be read.
func Check(path string, stdout, stderr io.Writer) int {
	wd, _ := os.Getwd()
	filename, data, err := Load(path, wd)
	if err == nil && filename == "" {
		err = errors.New("no policy given")
	}
	if err != nil {
		fmt.Fprintf(stderr, "gpuguard policy check: %v\n", err)
		return exitConfig
	}
	p, err := policy.Parse(filename, data)
	if err != nil {
		printErrors(stderr, err)
		return exitConfig
	}
	fmt.Fprintf(stdout, "%s: valid (policy version %d): %d knob(s): %s; %d rule(s): %s\n",
		filename, policy.Version, len(p.Knobs()), strings.Join(p.Knobs(), ", "), len(p.Rules()), strings.Join(p.Rules(), ", "))
	return exitOK
}

// printErrors writes one line per joined error.
func printErrors(w io.Writer, err error) {
	var multi interface{ Unwrap() []error }
	if errors.As(err, &multi) {
		for _, e := range multi.Unwrap() {
			fmt.Fprintln(w, e)
		}
		return
	}
	fmt.Fprintln(w, err)
}

// List prints the built-in presets, one per line with its description.
func List(stdout io.Writer) int {
	for _, name := range Names() {
		data, _ := Lookup(name)
		desc := ""
		if p, err := policy.Parse(PresetPrefix+name, data); err == nil {
			desc = p.Description()
		}
		fmt.Fprintf(stdout, "%-12s %s\n", name, desc)
	}
	return exitOK
}

// Init writes a commented starter policy for the command argv to stdout:
// the preset for the framework the command looks like (the guess and its
// reason in a comment), followed by what the policy reads from this command
// and what each rule would change, as comments. It returns 0, or 64 when
// argv is empty. The output always passes `gpuguard policy check`.
func Init(argv []string, stdout, stderr io.Writer) int {
	if len(argv) > 0 && argv[0] == "--" {
		argv = argv[1:]
	}
	if len(argv) == 0 {
		fmt.Fprintln(stderr, "gpuguard policy init: give the training command after --, e.g. gpuguard policy init -- python train.py --batch-size 64 > gpuguard.yaml")
		return exitUsage
	}
	name, why := Guess(argv)
	data, _ := Lookup(name)
	var b strings.Builder
	fmt.Fprintf(&b, "# gpuguard policy, written by `gpuguard policy init` for:\n#   %s\n", strings.Join(argv, " "))
	fmt.Fprintf(&b, "# Framework guessed: %s (%s). Other presets: %s.\n", name, why, strings.Join(Names(), ", "))
	b.WriteString("# Check the knobs against your script, then `gpuguard policy check gpuguard.yaml`\n")
	b.WriteString("# and `gpuguard run --dry-run -- COMMAND` to see what a relaunch would change.\n#\n")

	p, err := policy.Parse(PresetPrefix+name, data)
	if err != nil {
		fmt.Fprintf(stderr, "gpuguard policy init: built-in preset %s is invalid: %v\n", name, err)
		return 70
	}
	wd, _ := os.Getwd()
	job := policy.Job{Argv: argv, Env: os.Environ(), Dir: wd}
	vals, err := p.Start(job, os.ReadFile)
	if err != nil {
		b.WriteString("# Before running, fix (gpuguard run would stop with these):\n")
		for _, line := range errorLines(err) {
			fmt.Fprintf(&b, "#   %s\n", line)
		}
		// Show the rules against what could be read.
		vals = policy.Values{}
	} else {
		b.WriteString("# Read from this command:\n")
		for _, k := range p.Knobs() {
			if v, ok := vals[k]; ok {
				fmt.Fprintf(&b, "#   %s = %s\n", k, v)
			} else {
				fmt.Fprintf(&b, "#   %s: not set\n", k)
			}
		}
	}
	b.WriteString("# What each rule would do, in order, on repeated failures:\n")
	for _, line := range p.Preview(vals) {
		fmt.Fprintf(&b, "#   %s\n", line)
	}
	b.WriteString("\n")
	b.Write(data)
	io.WriteString(stdout, b.String())
	return exitOK
}

func errorLines(err error) []string {
	var multi interface{ Unwrap() []error }
	if errors.As(err, &multi) {
		var out []string
		for _, e := range multi.Unwrap() {
			out = append(out, e.Error())
		}
		return out
	}
	return []string{err.Error()}
}

// Guess names the preset whose framework the command looks like, and why.
// It looks at the words only (no files are read): Ultralytics' yolo command
// or its key=value words, Lightning CLI's --trainer./--data./--model.
// flags, Hugging Face TrainingArguments flags or launchers, Hydra's dotted
// or +/++ overrides; anything else is "argparse".
func Guess(argv []string) (preset, why string) {
	if filepath.Base(argv[0]) == "yolo" {
		return "ultralytics", "the command is yolo"
	}
	var kvKeys []string
	hydra := false
	for _, w := range argv[1:] {
		flag, _, _ := strings.Cut(w, "=")
		switch {
		case w == "ultralytics" || strings.HasPrefix(w, "ultralytics."):
			return "ultralytics", "the command runs ultralytics"
		case strings.HasPrefix(w, "--trainer.") || strings.HasPrefix(w, "--data.") || strings.HasPrefix(w, "--model."):
			return "lightning", flag + " is a Lightning CLI flag"
		case slices.Contains(hfFlags, flag):
			return "huggingface", flag + " is a TrainingArguments flag"
		case strings.HasPrefix(w, "-") || !strings.Contains(w, "="):
		case strings.HasPrefix(w, "+"):
			hydra = true
		default:
			kvKeys = append(kvKeys, flag)
			hydra = hydra || (strings.Contains(flag, ".") && !strings.Contains(flag, "/"))
		}
	}
	switch {
	case hydra:
		return "hydra", "it has Hydra-style key.path=value or +key=value overrides"
	case slices.ContainsFunc(kvKeys, func(k string) bool { return k == "batch" || k == "imgsz" || k == "workers" }):
		return "ultralytics", "it has Ultralytics key=value arguments (batch=, imgsz=, workers=)"
	case len(kvKeys) > 0:
		return "hydra", "it has key=value overrides"
	}
	return "argparse", "no framework-specific arguments, so plain flags"
}

// hfFlags are TrainingArguments flags that mark a Hugging Face Trainer script.
var hfFlags = []string{"--per_device_train_batch_size", "--gradient_accumulation_steps", "--model_name_or_path", "--output_dir", "--resume_from_checkpoint", "--per_device_eval_batch_size"}
