package cli

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/gpuguard/gpuguard/internal/policy"
)

// The command line is checked and put in order here, before urfave/cli sees
// it, so that gpuguard behaves like the tools people know:
//
//   - an unknown command or flag is one line naming it, with "did you mean"
//     when one is close, then the usage line, and exit status 64;
//   - `gpuguard help [COMMAND]` and `gpuguard --version` work;
//   - a command's flags may come anywhere among its arguments
//     (`gpuguard report RUN_DIR --json`), except after "--" and, for the
//     commands that take a job's command line (run, policy init), after the
//     job's first word: every word from there belongs to the job.
//
// urfave/cli (v2) stops at the first argument that is not a flag, so the
// flags are moved before the arguments, and "--" put between them.

// jobCommands are the commands whose arguments are a job's command line.
var jobCommands = map[string]bool{"run": true, "policy init": true}

// argsError is a command line that names something gpuguard does not have.
// Its message is the line naming it; usage is the usage line that follows.
type argsError struct {
	command string // "" for gpuguard itself
	msg     string
	usage   string
}

func (e *argsError) Error() string { return e.msg }

// commandUsage is the one usage line of cmd, whose full name is name.
func commandUsage(name string, cmd *cli.Command) string {
	if cmd.UsageText != "" {
		return cmd.UsageText
	}
	u := "gpuguard " + name
	if len(cmd.Subcommands) > 0 {
		names := make([]string, 0, len(cmd.Subcommands))
		for _, s := range cmd.Subcommands {
			names = append(names, s.Name)
		}
		return u + " " + strings.Join(names, "|") + " ..."
	}
	if visibleFlags(cmd) {
		u += " [flags]"
	}
	if cmd.ArgsUsage != "" {
		u += " " + cmd.ArgsUsage
	}
	return u
}

func visibleFlags(cmd *cli.Command) bool {
	for _, f := range cmd.Flags {
		if v, ok := f.(cli.VisibleFlag); !ok || v.IsVisible() {
			return true
		}
	}
	return false
}

// appUsage is gpuguard's own usage line.
func appUsage(cmds []*cli.Command) string {
	return "gpuguard COMMAND [flags] [ARGS...]; commands: " + strings.Join(commandNames(cmds), ", ") + ", help"
}

func commandNames(cmds []*cli.Command) []string {
	var names []string
	for _, c := range cmds {
		if !c.Hidden {
			names = append(names, c.Name)
		}
	}
	return names
}

func findCommand(cmds []*cli.Command, name string) *cli.Command {
	for _, c := range cmds {
		if c.Name == name {
			return c
		}
		for _, a := range c.Aliases {
			if a == name {
				return c
			}
		}
	}
	return nil
}

func unknownCommand(parent string, word string, cmds []*cli.Command, usage string) error {
	what := "command"
	if parent != "" {
		what = "subcommand of " + parent
	}
	return &argsError{command: parent,
		msg:   fmt.Sprintf("unknown %s %q%s", what, word, policy.DidYouMean(word, commandNames(cmds))),
		usage: usage}
}

// flagSpec is what the normaliser needs to know of one flag.
type flagSpec struct {
	takesValue bool
}

// flagSpecs are cmd's flags by every name, with the help flag every
// command has.
func flagSpecs(cmd *cli.Command) map[string]flagSpec {
	specs := map[string]flagSpec{"help": {}, "h": {}}
	for _, f := range cmd.Flags {
		_, isBool := f.(*cli.BoolFlag)
		for _, n := range f.Names() {
			specs[n] = flagSpec{takesValue: !isBool}
		}
	}
	return specs
}

func flagCandidates(specs map[string]flagSpec) []string {
	var c []string
	for n := range specs {
		if len(n) > 1 {
			c = append(c, "--"+n)
		}
	}
	return c
}

// normalize checks args (args[0] is the program) against cmds and returns
// them as urfave/cli is to see them: help and --version rewritten to the
// help flag and the version command, each command's flags before its
// arguments.
func normalize(args []string, cmds []*cli.Command) ([]string, error) {
	if len(args) <= 1 {
		return args, nil
	}
	out := []string{args[0]}
	rest, word, err := ownFlags(args[1:], cmds)
	if err != nil {
		return nil, err
	}
	if word != "" {
		return append(out, word), nil
	}
	if len(rest) == 0 {
		return out, nil
	}
	if rest[0] == completeCommand {
		return args, nil // the words typed so far, as they are
	}
	if rest[0] == "help" {
		return helpTopic(args[0], rest[1:], cmds)
	}
	cmd := findCommand(cmds, rest[0])
	if cmd == nil {
		return nil, unknownCommand("", rest[0], cmds, appUsage(cmds))
	}
	name := cmd.Name
	out = append(out, rest[0])
	rest = rest[1:]
	if len(cmd.Subcommands) > 0 {
		if len(rest) == 0 || strings.HasPrefix(rest[0], "-") && rest[0] != "-" {
			// `gpuguard policy` and `gpuguard policy --help`: its help.
			if err := onlyHelpFlags(name, cmd, rest); err != nil {
				return nil, err
			}
			return append(out, "--help"), nil
		}
		sub := findCommand(cmd.Subcommands, rest[0])
		if sub == nil {
			return nil, unknownCommand(name, rest[0], cmd.Subcommands, commandUsage(name, cmd))
		}
		out = append(out, rest[0])
		rest = rest[1:]
		name += " " + sub.Name
		cmd = sub
	}
	flags, positional, help, err := flagsFirst(name, cmd, rest)
	if err != nil {
		return nil, err
	}
	if help {
		return append(out, "--help"), nil
	}
	out = append(out, flags...)
	if len(positional) > 0 {
		out = append(out, "--")
		out = append(out, positional...)
	}
	return out, nil
}

// ownFlags reads gpuguard's own flags, before the command: the rest of
// args, or the one word a flag stands for ("version", "--help").
func ownFlags(args []string, cmds []*cli.Command) (rest []string, word string, err error) {
	rest = args
	for len(rest) > 0 && strings.HasPrefix(rest[0], "-") && rest[0] != "-" {
		switch rest[0] {
		case "--version", "-version", "-v":
			return nil, "version", nil
		case "--help", "-help", "-h":
			return nil, "--help", nil
		case "--":
			rest = rest[1:]
			continue
		}
		name, _, _ := strings.Cut(strings.TrimLeft(rest[0], "-"), "=")
		return nil, "", &argsError{
			msg: fmt.Sprintf("unknown flag %s%s", rest[0],
				policy.DidYouMean("--"+name, []string{"--help", "--version"})),
			usage: appUsage(cmds)}
	}
	return rest, "", nil
}

// helpTopic is `gpuguard help [COMMAND [SUBCOMMAND]]`: that command's --help.
func helpTopic(program string, topic []string, cmds []*cli.Command) ([]string, error) {
	if len(topic) == 0 {
		return []string{program, "--help"}, nil
	}
	norm, err := normalize(append([]string{program}, topic...), cmds)
	if err != nil {
		return nil, err
	}
	// Keep only the command words.
	words := []string{program}
	for _, w := range norm[1:] {
		if strings.HasPrefix(w, "-") {
			break
		}
		words = append(words, w)
	}
	return append(words, "--help"), nil
}

// onlyHelpFlags refuses a flag other than help given to a command that has
// subcommands, before any of them.
func onlyHelpFlags(name string, cmd *cli.Command, args []string) error {
	for _, a := range args {
		if a != "--help" && a != "-h" && a != "-help" {
			flagName, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
			return &argsError{command: name,
				msg:   fmt.Sprintf("unknown flag %s%s", a, policy.DidYouMean("--"+flagName, []string{"--help"})),
				usage: commandUsage(name, cmd)}
		}
	}
	return nil
}

// flagsFirst checks the command's arguments and sorts them into its flags
// (each with its value) and its positional arguments: all the words after
// "--", and for a job command (run) all from the first that is not a flag.
// help: a help flag was among them.
func flagsFirst(name string, cmd *cli.Command, args []string) (flags, positional []string, help bool, err error) {
	specs := flagSpecs(cmd)
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			positional = append(positional, args[i+1:]...)
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			if jobCommands[name] {
				positional = append(positional, args[i:]...)
				break
			}
			positional = append(positional, a)
			continue
		}
		flagName, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		spec, ok := specs[flagName]
		if !ok {
			return nil, nil, false, &argsError{command: name,
				msg:   fmt.Sprintf("unknown flag %s%s", a, policy.DidYouMean("--"+flagName, flagCandidates(specs))),
				usage: commandUsage(name, cmd)}
		}
		if flagName == "help" || flagName == "h" {
			return nil, nil, true, nil
		}
		if spec.takesValue && !hasValue && i+1 >= len(args) {
			return nil, nil, false, &argsError{command: name,
				msg:   fmt.Sprintf("%s needs a value, e.g. %s", a, flagExample(flagName, cmd)),
				usage: commandUsage(name, cmd)}
		}
		flags = append(flags, a)
		if spec.takesValue && !hasValue && i+1 < len(args) {
			i++
			flags = append(flags, args[i])
		}
	}
	return flags, positional, false, nil
}

// usageFailure is what a usage error urfave/cli finds (a flag's value that
// does not parse) becomes: the error alone, said once, in gpuguard's words
// (what the flag expects, with an example), with the command's usage line
// after it, instead of the whole help between two copies.
func usageFailure(name string, cmd *cli.Command) cli.OnUsageErrorFunc {
	return func(_ *cli.Context, err error, _ bool) error {
		return &argsError{command: name, msg: flagValueMessage(err.Error(), cmd), usage: commandUsage(name, cmd)}
	}
}

// flagValueMessage rewrites Go's `invalid value "10" for flag -grace: parse
// error` as what the flag expects, with an example.
func flagValueMessage(msg string, cmd *cli.Command) string {
	var value, flagName string
	if _, err := fmt.Sscanf(msg, "invalid value %q for flag -%s", &value, &flagName); err != nil {
		return msg
	}
	flagName = strings.TrimSuffix(flagName, ":")
	for _, f := range cmd.Flags {
		if !slices.Contains(f.Names(), flagName) {
			continue
		}
		switch f.(type) {
		case *cli.DurationFlag:
			return fmt.Sprintf("--%s %s: a duration is written with a unit, e.g. %s (units: ms, s, m, h)", flagName, value, durationExample(value))
		case *cli.IntFlag:
			return fmt.Sprintf("--%s %s: expected a whole number, e.g. %s", flagName, value, flagExample(flagName, cmd))
		}
	}
	return msg
}

// durationExample is value with a unit when it is a bare number ("10" gives
// "10s"), else 30s.
func durationExample(value string) string {
	if _, err := strconv.ParseFloat(value, 64); err == nil && value != "" {
		return value + "s"
	}
	return "30s"
}

// flagExamples are a value of each flag that takes one, for messages.
var flagExamples = map[string]string{
	"plot": "--plot memory.png", "policy": "--policy gpuguard.yaml", "run-dir": "--run-dir runs/try1",
	"resume-run": "--resume-run .gpuguard/runs/ID", "pty": "--pty never", "probe": "--probe torch",
	"grace": "--grace 30s", "group-timeout": "--group-timeout 2m", "exit-codes": "--exit-codes scheduler",
	"group": "--group auto", "group-rank": "--group-rank 0", "group-size": "--group-size 2",
	"notify": "--notify https://hooks.example.com/gpuguard", "notify-command": "--notify-command 'mail -s gpuguard me'",
	"metrics-file": "--metrics-file /var/lib/node_exporter/gpuguard.prom",
}

// flagExample is an example of flag name with a value.
func flagExample(name string, cmd *cli.Command) string {
	if e, ok := flagExamples[name]; ok {
		return e
	}
	return "--" + name + " VALUE"
}
