// Package cli is gpuguard's command line: one file per command, each with a
// newXCmd function that parses the command's flags and arguments into an
// options struct and hands it to the function that does the work (the
// runF seam, which tests replace to see the options), and root.go, which
// assembles the commands and turns every error into the exit status.
//
// The packages that do the work (supervisor, explain, report, doctor, policy
// and presets) return errors that carry their status (package exitcode);
// exitStatus below is the one place that prints them and picks the status.
package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/gpuguard/gpuguard/internal/exitcode"
)

// Streams are the standard streams the commands read and write. In and Out
// are files because `gpuguard run` hands them to the job and asks whether
// they are terminals.
type Streams struct {
	In     *os.File
	Out    *os.File
	ErrOut io.Writer

	// checked is Out as the commands other than run write to it: it keeps
	// the first write error, which Main turns into exit status 74 (set by
	// Main; nil means Out itself).
	checked *checkedWriter
}

// stdout is where a command other than run writes its output.
func (s Streams) stdout() io.Writer {
	if s.checked != nil {
		return s.checked
	}
	return s.Out
}

// checkedWriter is a writer that remembers its first error: output that
// could not be written (a full disk, `> /dev/full`, a closed pipe) is a
// failure of the command however the code that wrote it handled the error.
type checkedWriter struct {
	w   io.Writer
	err error
}

func (c *checkedWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	if err != nil && c.err == nil {
		c.err = err
	}
	return n, err
}

// System returns the process's own standard streams.
func System() Streams { return Streams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr} }

// Main runs gpuguard with args (args[0] is the program name) on the streams
// s and returns the process's exit status. version is what `gpuguard
// version` prints.
func Main(args []string, s Streams, version string) int {
	s.checked = &checkedWriter{w: s.Out}
	app := newApp(s, version,
		newRunCmd(s, nil),
		newExplainCmd(s, nil),
		newReportCmd(s, nil),
		newDoctorCmd(s, nil),
		newPolicyCmd(s),
		newVersionCmd(s, version),
		newCompletionCmd(s),
	)
	app.Commands = append(app.Commands, newCompleteCmd(s, func() []*cli.Command { return app.Commands }))
	err := runApp(app, args)
	if werr := s.checked.err; werr != nil {
		// The output is lost: whatever else the command had to say, its
		// status is 74, as the README's table says.
		fmt.Fprintf(s.ErrOut, "%s: cannot write the output: %v\n", commandName(args, app.Commands), werr)
		return exitcode.IOErr
	}
	return exitStatus(err, s.ErrOut)
}

// commandName is "gpuguard COMMAND [SUBCOMMAND]" for args, as far as they
// name one.
func commandName(args []string, cmds []*cli.Command) string {
	name := "gpuguard"
	for _, a := range args[1:] {
		c := findCommand(cmds, a)
		if c == nil {
			break
		}
		name += " " + c.Name
		cmds = c.Subcommands
	}
	return name
}

// runApp checks args and puts them in order (normalize), then runs app.
func runApp(app *cli.App, args []string) error {
	norm, err := normalize(args, app.Commands)
	if err != nil {
		return err
	}
	return app.Run(norm)
}

// newApp assembles the commands into the gpuguard command line.
func newApp(s Streams, version string, cmds ...*cli.Command) *cli.App {
	nameErrors("", cmds)
	return &cli.App{
		Name:      "gpuguard",
		Usage:     "run a training job, recover it from out-of-memory failures",
		Version:   versionString(version, readBuildInfo),
		Writer:    s.stdout(),
		ErrWriter: s.ErrOut,
		// Errors become exit statuses in exitStatus, never in urfave/cli
		// (whose default handler would call os.Exit).
		ExitErrHandler:         func(*cli.Context, error) {},
		HideHelpCommand:        true,
		UseShortOptionHandling: false,
		Commands:               cmds,
	}
}

// commandError is an error returned by a command's action, and the
// command's name ("report", "policy check") for the message.
type commandError struct {
	command string
	err     error
}

func (e *commandError) Error() string { return e.command + ": " + e.err.Error() }
func (e *commandError) Unwrap() error { return e.err }

// nameErrors makes the actions of cmds, and of their subcommands, return
// their errors as *commandError naming the command.
func nameErrors(parent string, cmds []*cli.Command) {
	for _, cmd := range cmds {
		name := strings.TrimSpace(parent + " " + cmd.Name)
		cmd.OnUsageError = usageFailure(name, cmd)
		cmd.HideHelpCommand = true
		withExamples(name, cmd)
		if action := cmd.Action; action != nil {
			cmd.Action = func(c *cli.Context) error {
				if err := action(c); err != nil {
					return &commandError{command: name, err: err}
				}
				return nil
			}
		}
		nameErrors(name, cmd.Subcommands)
	}
}

// exitStatus is where every error becomes gpuguard's exit status, and is
// printed:
//   - nil: 0;
//   - a command's error: "gpuguard COMMAND: message" on stderr, and the
//     status the error carries (exitcode.Of: 70 for one that carries none).
//     An error that carries a status only (exitcode.Status: the job's own
//     status, or a failure the command has reported itself) prints nothing;
//   - a command line gpuguard cannot follow (an unknown command or flag, a
//     flag's value that does not parse): "gpuguard[ COMMAND]: message", the
//     usage line, and 64;
//   - urfave/cli's other errors: "gpuguard: message" and 64; those that
//     carry a status exit with it, having said nothing.
func exitStatus(err error, stderr io.Writer) int {
	var cmdErr *commandError
	var argsErr *argsError
	var coder cli.ExitCoder
	switch {
	case err == nil:
		return exitcode.OK
	case errors.As(err, &argsErr):
		prefix := "gpuguard"
		if argsErr.command != "" {
			prefix += " " + argsErr.command
		}
		fmt.Fprintf(stderr, "%s: %s\nusage: %s\n", prefix, argsErr.msg, argsErr.usage)
		return exitcode.Usage
	case errors.As(err, &cmdErr):
		if !exitcode.Silent(cmdErr.err) {
			fmt.Fprintf(stderr, "gpuguard %s: %v\n", cmdErr.command, cmdErr.err)
		}
		return exitcode.Of(cmdErr.err)
	case errors.As(err, &coder):
		return coder.ExitCode()
	}
	fmt.Fprintf(stderr, "gpuguard: %v\n", err)
	return exitcode.Usage
}

// usageError is a command line that does not say what the command needs.
func usageError(format string, a ...any) error {
	return &exitcode.Error{Code: exitcode.Usage, Msg: fmt.Sprintf(format, a...)}
}
