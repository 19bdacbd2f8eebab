package cli

import (
	"fmt"

	"github.com/urfave/cli/v2"
)

// newVersionCmd is `gpuguard version`.
func newVersionCmd(s Streams, version string) *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print gpuguard's version",
		Action: func(c *cli.Context) error {
			fmt.Fprintln(s.Out, "gpuguard", version)
			return nil
		},
	}
}
