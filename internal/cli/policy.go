package cli

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/gpuguard/gpuguard/internal/exitcode"
	"github.com/gpuguard/gpuguard/internal/policy"
	"github.com/gpuguard/gpuguard/internal/presets"
	"github.com/gpuguard/gpuguard/internal/redact"
)

// newPolicyCmd is `gpuguard policy check|init|list`.
func newPolicyCmd(s Streams) *cli.Command {
	return &cli.Command{
		Name:  "policy",
		Usage: "check, create or list policy files",
		Subcommands: []*cli.Command{
			newPolicyCheckCmd(s, nil),
			newPolicyInitCmd(s, nil),
			newPolicyListCmd(s, nil),
		},
	}
}

// policyCheckOptions are the inputs of `gpuguard policy check`.
type policyCheckOptions struct {
	Path   string // a policy file, or a preset's name
	Dir    string // the working directory, for a relative Path
	Out    io.Writer
	ErrOut io.Writer
}

// newPolicyCheckCmd is `gpuguard policy check [FILE|PRESET]`; without one it
// checks ./gpuguard.yaml. runF does the work; nil means policyCheckRun.
func newPolicyCheckCmd(s Streams, runF func(*policyCheckOptions) error) *cli.Command {
	if runF == nil {
		runF = policyCheckRun
	}
	return &cli.Command{
		Name:      "check",
		Usage:     "validate a policy file or preset",
		UsageText: "gpuguard policy check [FILE|PRESET] (default: the project's gpuguard.yaml, from here up to the repository's root)",
		Action: func(c *cli.Context) error {
			if c.NArg() > 1 {
				return usageError("give one policy file; usage: gpuguard policy check [FILE|PRESET]")
			}
			wd, _ := os.Getwd()
			path := c.Args().First()
			if path == "" {
				path = defaultPolicy(wd)
				if path == "" {
					return &exitcode.Error{Code: exitcode.NoInput,
						Msg: "no policy file named, and no gpuguard.yaml here; usage: gpuguard policy check [FILE|PRESET] (presets: " + strings.Join(presets.Names(), ", ") + "); gpuguard.yaml is looked for from here up to the repository's root"}
				}
				if filepath.Dir(path) != "." {
					sayFound(s.ErrOut, "policy check", "checking", path)
				}
			}
			return runF(&policyCheckOptions{Path: path, Dir: wd, Out: s.stdout(), ErrOut: s.ErrOut})
		},
	}
}

// defaultPolicy is the policy file `policy check` checks when none is
// named: the one `gpuguard run` would use, the nearest gpuguard.yaml (or
// gpuguard.yml) from dir up to the repository's root, as ./NAME when it is
// in dir; "" when there is none.
func defaultPolicy(dir string) string {
	p := projectPolicy(dir)
	if p != "" && filepath.Dir(p) == "." {
		return "./" + p
	}
	return p
}

// policyCheckRun validates a policy file (or preset). A valid one gets a
// one-paragraph summary on stdout. An invalid one gets every problem on
// stderr as "file:line:col: message" and exit status Config (78). A file
// that does not exist or cannot be read is NoInput (66).
func policyCheckRun(o *policyCheckOptions) error {
	filename, data, err := presets.Load(o.Path, o.Dir)
	if err == nil && filename == "" {
		err = errors.New("no policy given")
	}
	if err != nil {
		code := exitcode.Config
		path := o.Path
		if !filepath.IsAbs(path) {
			path = filepath.Join(o.Dir, path)
		}
		var pathErr *fs.PathError
		if _, serr := os.Stat(path); errors.As(err, &pathErr) || errors.Is(serr, fs.ErrNotExist) {
			code = exitcode.NoInput
		}
		return &exitcode.Error{Code: code, Err: err}
	}
	p, err := policy.Parse(filename, data)
	if err != nil {
		for _, e := range errorList(err) {
			fmt.Fprintln(o.ErrOut, e)
		}
		return exitcode.Status(exitcode.Config)
	}
	fmt.Fprintf(o.Out, "%s: valid (policy version %d): %d knob(s): %s; %d rule(s): %s\n",
		filename, policy.Version, len(p.Knobs()), strings.Join(p.Knobs(), ", "), len(p.Rules()), strings.Join(p.Rules(), ", "))
	if !strings.HasPrefix(filename, presets.PresetPrefix) {
		// A policy file is checked against the directory it is checked in:
		// a glob that matches nothing now is a warning, not an error (the
		// job may not have saved yet). A preset is not about this directory.
		for _, w := range unmatchedGlobWarnings(p, o.Dir) {
			fmt.Fprintln(o.ErrOut, w)
		}
	}
	return nil
}

// errorList is the errors joined in err, or err alone.
func errorList(err error) []error {
	var multi interface{ Unwrap() []error }
	if errors.As(err, &multi) {
		return multi.Unwrap()
	}
	return []error{err}
}

// policyInitOptions are the inputs of `gpuguard policy init`.
type policyInitOptions struct {
	Argv []string // the training command, not empty
	Env  []string // its environment, for the values the policy reads
	Dir  string   // its working directory
	Out  io.Writer
}

// newPolicyInitCmd is `gpuguard policy init -- COMMAND [ARGS...]`. runF does
// the work; nil means policyInitRun.
func newPolicyInitCmd(s Streams, runF func(*policyInitOptions) error) *cli.Command {
	if runF == nil {
		runF = policyInitRun
	}
	return &cli.Command{
		Name:      "init",
		Usage:     "print a commented starter policy for a command",
		UsageText: "gpuguard policy init -- COMMAND [ARGS...]",
		Action: func(c *cli.Context) error {
			argv := c.Args().Slice()
			if len(argv) > 0 && argv[0] == "--" {
				argv = argv[1:]
			}
			if len(argv) == 0 {
				return usageError("give the training command after --, e.g. gpuguard policy init -- python train.py --batch-size 64 > gpuguard.yaml")
			}
			wd, _ := os.Getwd()
			return runF(&policyInitOptions{Argv: argv, Env: os.Environ(), Dir: wd, Out: s.stdout()})
		},
	}
}

// policyInitRun writes a commented starter policy for the command o.Argv:
// the preset for the framework the command looks like (the guess and its
// reason in a comment), followed by what the policy reads from this command
// and what each rule would change, as comments. The output always passes
// `gpuguard policy check`.
func policyInitRun(o *policyInitOptions) error {
	name, why := presets.Guess(o.Argv)
	data, _ := presets.Lookup(name)
	if globs, from := guessedGlobs(o.Argv); len(globs) > 0 {
		data, _ = withGuessedGlobs(data, globs, from)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# gpuguard policy, written by `gpuguard policy init` for:\n#   %s\n", strings.Join(redact.Argv(o.Argv), " ")) // a file in the project: no secret (docs/secrets.md)
	fmt.Fprintf(&b, "# Framework guessed: %s (%s). Other presets: %s.\n", name, why, strings.Join(presets.Names(), ", "))
	b.WriteString("# Check the knobs against your script, then `gpuguard policy check gpuguard.yaml`\n")
	b.WriteString("# and `gpuguard run --dry-run -- COMMAND` to see what a relaunch would change.\n#\n")

	p, err := policy.Parse(presets.PresetPrefix+name, data)
	if err != nil {
		return &exitcode.Error{Code: exitcode.Software, Err: err, Msg: fmt.Sprintf("built-in preset %s is invalid: %v", name, err)}
	}
	job := policy.Job{Argv: o.Argv, Env: o.Env, Dir: o.Dir}
	vals, err := p.Start(job, os.ReadFile)
	if err != nil {
		b.WriteString("# Before running, fix (gpuguard run would stop with these):\n")
		for _, e := range errorList(err) {
			fmt.Fprintf(&b, "#   %s\n", e)
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
	io.WriteString(o.Out, b.String())
	return nil
}

// newPolicyListCmd is `gpuguard policy list`. runF does the work; nil means
// policyListRun.
func newPolicyListCmd(s Streams, runF func(out io.Writer) error) *cli.Command {
	if runF == nil {
		runF = policyListRun
	}
	return &cli.Command{
		Name:  "list",
		Usage: "list the built-in presets",
		Action: func(c *cli.Context) error {
			return runF(s.stdout())
		},
	}
}

// policyListRun prints the built-in presets, one per line with its
// description.
func policyListRun(out io.Writer) error {
	for _, name := range presets.Names() {
		data, _ := presets.Lookup(name)
		desc := ""
		if p, err := policy.Parse(presets.PresetPrefix+name, data); err == nil {
			desc = p.Description()
		}
		fmt.Fprintf(out, "%-12s %s\n", name, desc)
	}
	return nil
}
