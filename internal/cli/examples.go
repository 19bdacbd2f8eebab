package cli

import (
	"strings"

	"github.com/urfave/cli/v2"
)

// examples are the EXAMPLES section of each command's help, by the
// command's full name: commands as people type them, each with what it does.
var examples = map[string][]string{
	"run": {
		"gpuguard run -- python train.py --batch-size 64",
		"    run train.py; on out-of-memory, relaunch it from its checkpoint as gpuguard.yaml says",
		"gpuguard run --dry-run -- python train.py --batch-size 64",
		"    print what the first attempt gets and what each rule would change; start nothing",
		"gpuguard run --policy huggingface -- python finetune.py --per_device_train_batch_size 16",
		"gpuguard run --resume-run .gpuguard/runs/ID",
		"    continue a run that gave up (or was stopped) with the settings it reached",
		"gpuguard run --quiet --exit-codes scheduler -- torchrun --nproc-per-node 4 train.py",
	},
	"explain": {
		"gpuguard explain",
		"    the latest run, attempt by attempt",
		"gpuguard explain slurm-123.out",
		"gpuguard explain --json .gpuguard/runs/ID",
	},
	"report": {
		"gpuguard report",
		"    the latest run: attempts, verdicts, memory peaks",
		"gpuguard report --plot /tmp/memory.png",
		"gpuguard report --json .gpuguard/runs/ID",
	},
	"doctor": {
		"gpuguard doctor",
		"gpuguard doctor --json",
	},
	"policy": {
		"gpuguard policy init -- python train.py --batch-size 64 > gpuguard.yaml",
		"gpuguard policy check",
		"gpuguard policy list",
	},
	"policy check": {
		"gpuguard policy check",
		"    the project's gpuguard.yaml, from here up to the repository's root",
		"gpuguard policy check lightning",
	},
	"policy init": {
		"gpuguard policy init -- python train.py --batch-size 64 > gpuguard.yaml",
	},
	"policy list": {
		"gpuguard policy list",
	},
	"completion": {
		"gpuguard completion bash > ~/.local/share/bash-completion/completions/gpuguard",
		"gpuguard completion fish > ~/.config/fish/completions/gpuguard.fish",
	},
	"version": {
		"gpuguard version",
	},
}

// withExamples gives cmd (full name name) a help page that ends with its
// EXAMPLES section.
func withExamples(name string, cmd *cli.Command) {
	ex, ok := examples[name]
	if !ok {
		return
	}
	tmpl := cli.CommandHelpTemplate
	if len(cmd.Subcommands) > 0 {
		tmpl = cli.SubcommandHelpTemplate
	}
	cmd.CustomHelpTemplate = strings.TrimRight(tmpl, "\n") + "\n\nEXAMPLES:\n   " + strings.Join(ex, "\n   ") + "\n"
}
