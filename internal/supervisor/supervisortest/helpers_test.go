package supervisortest_test

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/gpuguard/gpuguard/internal/supervisor/supervisortest"
)

// unusedEnv, set, adds a helper that no test runs: the run must fail.
const unusedEnv = "SUPERVISORTEST_TEST_UNUSED"

func TestMain(m *testing.M) {
	helpers := supervisortest.Modes("exit", "printenv")
	if os.Getenv(unusedEnv) != "" {
		helpers = helpers.With(supervisortest.Helpers{"never": func([]string) int { return 0 }})
	}
	supervisortest.Main(m, helpers, supervisortest.Programs(supervisortest.TrainerProgram))
}

// A helper's command line re-executes the test binary, which runs the
// helper and exits with its status.
func TestArgvRunsTheHelper(t *testing.T) {
	argv := supervisortest.Argv("exit", "3")
	err := exec.Command(argv[0], argv[1:]...).Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("%q: %v, want exit status 3", argv, err)
	}
}

// The fake trainer program, as a testscript session runs it: by name from
// PATH, with an environment of its own.
func TestTrainerProgram(t *testing.T) {
	cmd := exec.Command(supervisortest.TrainerProgram, "printenv", "X")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "X=1"}
	out, err := cmd.Output()
	if err != nil || string(out) != "X=1\n" {
		t.Fatalf("%s printenv X: %q, %v", supervisortest.TrainerProgram, out, err)
	}
	cmd = exec.Command(supervisortest.TrainerProgram, "no-such-mode")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	out, err = cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), `unknown mode "no-such-mode"`) {
		t.Fatalf("%s no-such-mode: %q, %v; want an error naming the mode", supervisortest.TrainerProgram, out, err)
	}
}

// Argv refuses a helper that the binary did not register.
func TestArgvUnregistered(t *testing.T) {
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), `"tree" is not in this test binary's table`) {
			t.Errorf("Argv(tree) recovered %v, want a panic naming the helper", r)
		}
	}()
	supervisortest.Argv("tree")
}

// A registered helper that no test runs fails a whole run of the package,
// and only a whole run: with -test.run it proves nothing.
func TestUnusedHelperFailsTheRun(t *testing.T) {
	if os.Getenv(unusedEnv) != "" {
		return // this is the run under test
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-test.count=1")
	cmd.Env = append(os.Environ(), unusedEnv+"=1")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(out), `helper "never" is registered but no test ran it`) {
		t.Fatalf("whole run with an unused helper: %v\n%s\nwant exit status 1 naming it", err, out)
	}
	// printenv ran only as a program with an environment of its own
	// (TestTrainerProgram): its record is found beside the test binary.
	if strings.Contains(string(out), `helper "exit"`) || strings.Contains(string(out), `helper "printenv"`) {
		t.Errorf("helpers that ran were reported unused:\n%s", out)
	}
	cmd = exec.Command(self, "-test.count=1", "-test.run=TestArgvRunsTheHelper")
	cmd.Env = append(os.Environ(), unusedEnv+"=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("filtered run with an unused helper: %v\n%s\nwant success", err, out)
	}
}
