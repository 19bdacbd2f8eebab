package cli

import (
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/gpuguard/gpuguard/internal/supervisor"
)

// --probe torch reaches the supervisor; another name is a usage error.
func TestRunProbeFlag(t *testing.T) {
	var got supervisor.Config
	cmd := func(s Streams) *cli.Command {
		return newRunCmd(s, func(c supervisor.Config) error { got = c; return nil })
	}
	if r := gpuguardWith(t, cmd, "run", "--probe", "torch", "--", "t"); r.code != 0 || got.Probe != "torch" {
		t.Fatalf("exit %d, probe %q", r.code, got.Probe)
	}
	r := gpuguardWith(t, cmd, "run", "--probe", "jax", "--", "t")
	if r.code != 64 || r.stderr != "gpuguard run: unknown probe \"jax\" (there is one: torch)\n" {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
}
