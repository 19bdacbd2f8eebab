package presets

import (
	"path/filepath"
	"slices"
	"strings"
)

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

// hfFlags are TrainingArguments flags that mark a Hugging Face Trainer
// script. --output_dir is not one of them: plain argparse scripts use it
// as often (it would give them the Trainer's knobs and checkpoint layout).
var hfFlags = []string{"--per_device_train_batch_size", "--gradient_accumulation_steps", "--model_name_or_path", "--resume_from_checkpoint", "--per_device_eval_batch_size"}
