// Command gpuguard runs a training command, watches it for out-of-memory
// failures, and relaunches it from its last checkpoint with settings that fit.
//
// The command line is package internal/cli; this file only starts it, so that
// os.Exit is called in one place, after every deferred cleanup has run.
package main

import (
	"os"

	"github.com/gpuguard/gpuguard/internal/cli"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() { os.Exit(cli.Main(os.Args, cli.System(), version)) }
