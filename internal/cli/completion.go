package cli

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/gpuguard/gpuguard/internal/presets"
)

// Shell completion. `gpuguard completion bash|zsh|fish` prints a script
// that asks gpuguard itself what may come next: the hidden command
// `gpuguard __complete WORD... CURRENT` prints the candidates, one a line,
// for the words typed so far and the word being typed (empty at a new
// word). It knows gpuguard's commands, subcommands and flags, the presets,
// the run directories under .gpuguard/runs and "latest"; where it prints
// nothing the scripts complete file names.

// completeCommand is the hidden command the scripts call.
const completeCommand = "__complete"

func newCompleteCmd(s Streams, cmds func() []*cli.Command) *cli.Command {
	return &cli.Command{
		Name:            completeCommand,
		Hidden:          true,
		SkipFlagParsing: true,
		HideHelp:        true,
		HideHelpCommand: true,
		Action: func(c *cli.Context) error {
			wd, _ := os.Getwd()
			for _, w := range complete(c.Args().Slice(), cmds(), wd) {
				fmt.Fprintln(s.stdout(), w)
			}
			return nil
		},
	}
}

var shells = []string{"bash", "fish", "zsh"}

func newCompletionCmd(s Streams) *cli.Command {
	return &cli.Command{
		Name:      "completion",
		Usage:     "print a shell completion script: source <(gpuguard completion bash)",
		UsageText: "gpuguard completion bash|zsh|fish",
		Description: "bash:  source <(gpuguard completion bash)   (or save it in ~/.local/share/bash-completion/completions/gpuguard)\n" +
			"zsh:   source <(gpuguard completion zsh)    (after compinit)\n" +
			"fish:  gpuguard completion fish > ~/.config/fish/completions/gpuguard.fish",
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usageError("name one shell; usage: gpuguard completion bash|zsh|fish")
			}
			script, ok := map[string]string{"bash": bashCompletion, "zsh": zshCompletion, "fish": fishCompletion}[c.Args().First()]
			if !ok {
				return usageError("no completion for shell %q; usage: gpuguard completion bash|zsh|fish", c.Args().First())
			}
			_, err := io.WriteString(s.stdout(), script)
			return err
		},
	}
}

const bashCompletion = `# bash completion for gpuguard: source <(gpuguard completion bash)
_gpuguard() {
    local cur="${COMP_WORDS[COMP_CWORD]}" IFS=$'\n'
    COMPREPLY=($(compgen -W "$("${COMP_WORDS[0]}" __complete "${COMP_WORDS[@]:1:COMP_CWORD}" 2>/dev/null)" -- "$cur"))
}
complete -o default -o filenames -F _gpuguard gpuguard
`

const zshCompletion = `#compdef gpuguard
# zsh completion for gpuguard: source <(gpuguard completion zsh)
_gpuguard() {
    local -a candidates
    candidates=("${(@f)$("${words[1]}" __complete "${(@)words[2,CURRENT]}" 2>/dev/null)}")
    candidates=(${candidates:#})
    if (( ${#candidates} )); then
        compadd -f -a candidates
    else
        _files
    fi
}
if [[ $zsh_eval_context[-1] == loadautofunc ]]; then
    _gpuguard "$@"
else
    compdef _gpuguard gpuguard
fi
`

const fishCompletion = `# fish completion for gpuguard: gpuguard completion fish > ~/.config/fish/completions/gpuguard.fish
function __gpuguard_complete
    set -l words (commandline -opc)
    gpuguard __complete $words[2..-1] (commandline -ct) 2>/dev/null
end
complete -c gpuguard -f -n 'test -n "$(__gpuguard_complete)"' -a '(__gpuguard_complete)'
complete -c gpuguard -F -n 'test -z "$(__gpuguard_complete)"'
`

// complete is what may come at the last of words (the word being typed,
// maybe empty), after the others, given gpuguard's commands cmds, in the
// directory dir. Nil means file names.
func complete(words []string, cmds []*cli.Command, dir string) []string {
	if len(words) == 0 {
		words = []string{""}
	}
	cur, before := words[len(words)-1], words[:len(words)-1]
	var cmd *cli.Command
	name := ""
	var args []string // the command's arguments before cur, flags left out
	prevFlag := ""    // the flag before cur, when it takes a value
	for _, w := range before {
		switch {
		case prevFlag != "":
			prevFlag = ""
		case w == "--":
			if jobCommands[name] {
				return nil // the job's command line
			}
			args = append(args, w)
		case strings.HasPrefix(w, "-") && w != "-" && cmd != nil && !(len(args) > 0 && args[len(args)-1] == "--"):
			flagName, _, hasValue := strings.Cut(strings.TrimLeft(w, "-"), "=")
			if spec, ok := flagSpecs(cmd)[flagName]; ok && spec.takesValue && !hasValue {
				prevFlag = flagName
			}
		case strings.HasPrefix(w, "-") && w != "-":
		case cmd == nil && w == "help":
			name = "help"
			cmd = &cli.Command{Name: "help"}
		case cmd == nil:
			if cmd = findCommand(cmds, w); cmd == nil {
				return nil
			}
			name = cmd.Name
		case len(cmd.Subcommands) > 0:
			sub := findCommand(cmd.Subcommands, w)
			if sub == nil {
				return nil
			}
			name += " " + sub.Name
			cmd = sub
		default:
			if jobCommands[name] {
				return nil
			}
			args = append(args, w)
		}
	}
	var cands []string
	switch {
	case prevFlag != "":
		cands = flagValues(prevFlag, dir)
	case cmd == nil && strings.HasPrefix(cur, "-"):
		cands = []string{"--help", "--version"}
	case cmd == nil:
		cands = append(commandNames(cmds), "help")
	case name == "help":
		if len(args) == 0 {
			cands = commandNames(cmds)
		}
	case len(cmd.Subcommands) > 0:
		cands = commandNames(cmd.Subcommands)
	case strings.HasPrefix(cur, "-"):
		for f := range flagSpecs(cmd) {
			if len(f) > 1 {
				cands = append(cands, "--"+f)
			}
		}
	default:
		cands = argValues(name, len(args), dir)
	}
	var out []string
	for _, c := range cands {
		if strings.HasPrefix(c, cur) {
			out = append(out, c)
		}
	}
	sort.Strings(out)
	return out
}

// flagValues are the values a flag may take; nil means file names.
func flagValues(flag, dir string) []string {
	switch flag {
	case "policy":
		return append(presets.Names(), policyFiles(dir)...)
	case "pty":
		return []string{"auto", "always", "never"}
	case "run-dir", "resume-run":
		return runDirs(dir)
	}
	return nil
}

// argValues are what the command name's argument number n may be; nil
// means file names.
func argValues(name string, n int, dir string) []string {
	switch name {
	case "report":
		if n == 0 {
			return append([]string{Latest}, runDirs(dir)...)
		}
	case "explain":
		// Run directories and "latest"; logs are files.
		if runs := runDirs(dir); len(runs) > 0 {
			return append(append([]string{Latest}, runs...), files(dir)...)
		}
	case "policy check":
		if n == 0 {
			return append(presets.Names(), policyFiles(dir)...)
		}
	case "completion":
		if n == 0 {
			return shells
		}
	}
	return nil
}

// policyFiles are the YAML files in dir.
func policyFiles(dir string) []string {
	var out []string
	for _, pat := range []string{"*.yaml", "*.yml"} {
		m, _ := filepath.Glob(filepath.Join(dir, pat))
		for _, p := range m {
			out = append(out, filepath.Base(p))
		}
	}
	return out
}

// files are the entries of dir, directories with a slash, for where file
// names and other candidates mix.
func files(dir string) []string {
	entries, _ := os.ReadDir(dir)
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		n := e.Name()
		if e.IsDir() {
			n += "/"
		}
		out = append(out, n)
	}
	return out
}
