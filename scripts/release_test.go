// Package scripts holds the tests of the project's scripts: the release
// build (release.sh, its linker release-ld.sh) is checked with objdump -T and
// started on an older glibc than the one it is built on.
package scripts

import (
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// oldest is the glibc the README promises the NVML build starts on (RHEL and
// Rocky 8).
const oldest = "2.28"

// tools skips the test when the release build's toolchain is missing.
func tools(t *testing.T) {
	t.Helper()
	for _, tool := range []string{"go", "gcc", "objdump", "objcopy", "git"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the release build needs %s, which is not on PATH: install go, gcc, binutils and git (Debian: apt-get install gcc binutils git)", tool)
		}
	}
}

// glibcRefs is each glibc symbol version objdump -T lists for bin, with the
// symbols bound to it.
func glibcRefs(t *testing.T, bin string) map[string][]string {
	t.Helper()
	out, err := exec.Command("objdump", "-T", bin).CombinedOutput()
	if err != nil {
		t.Fatalf("objdump -T %s: %v\n%s", bin, err, out)
	}
	re := regexp.MustCompile(`\(?GLIBC_([0-9][0-9.]*)\)?\s+(\S+)$`)
	refs := map[string][]string{}
	for _, line := range strings.Split(string(out), "\n") {
		if m := re.FindStringSubmatch(strings.TrimSpace(line)); m != nil {
			refs[m[1]] = append(refs[m[1]], m[2])
		}
	}
	return refs
}

// newer says whether glibc version a is newer than b ("2.34" > "2.3.3").
func newer(a, b string) bool {
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(pa) || i < len(pb); i++ {
		var x, y int
		if i < len(pa) {
			x, _ = strconv.Atoi(pa[i])
		}
		if i < len(pb) {
			y, _ = strconv.Atoi(pb[i])
		}
		if x != y {
			return x > y
		}
	}
	return false
}

// checkGlibc fails unless bin needs glibc oldest or older, in its symbols
// (objdump -T) and in its version references (objdump -p).
func checkGlibc(t *testing.T, bin string) {
	t.Helper()
	refs := glibcRefs(t, bin)
	if len(refs) == 0 {
		t.Fatalf("objdump -T %s lists no glibc symbol: is it linked dynamically?", bin)
	}
	for v, syms := range refs {
		if newer(v, oldest) {
			t.Errorf("%s needs GLIBC_%s (for %s), newer than the %s it must start on", bin, v, strings.Join(syms, ", "), oldest)
		}
	}
	out, err := exec.Command("objdump", "-p", bin).CombinedOutput()
	if err != nil {
		t.Fatalf("objdump -p %s: %v\n%s", bin, err, out)
	}
	for _, m := range regexp.MustCompile(`GLIBC_([0-9][0-9.]*)`).FindAllStringSubmatch(string(out), -1) {
		if newer(m[1], oldest) {
			t.Errorf("%s's version references (objdump -p) name GLIBC_%s, newer than %s", bin, m[1], oldest)
		}
	}
	for _, lib := range []string{"libpthread.so.0", "libdl.so.2"} {
		if !strings.Contains(string(out), "NEEDED               "+lib) {
			t.Errorf("%s does not name %s as needed: on glibc before 2.34 its pthread and dl functions are there (objdump -p):\n%s", bin, lib, out)
		}
	}
}

// checkStatic fails unless bin is linked statically: no dynamic linker, no
// library needed (objdump -T has no dynamic symbol table to list).
func checkStatic(t *testing.T, bin string) {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			libs, _ := f.ImportedLibraries()
			t.Errorf("%s is linked dynamically (%s; libraries %v): it must be static", bin, p.Type, libs)
		}
	}
}

// oldGlibc is the directory of an older glibc's libraries and dynamic linker
// (scripts/old-glibc.sh), or the test is skipped, or failed under CI.
func oldGlibc(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("GPUGUARD_OLD_GLIBC")
	if dir == "" {
		dir = "/var/cache/gpuguard/old-glibc"
	}
	lib := filepath.Join(dir, "lib", "x86_64-linux-gnu")
	if _, err := os.Stat(filepath.Join(lib, "ld-linux-x86-64.so.2")); err != nil {
		msg := fmt.Sprintf("no older glibc in %s to start the binary with: run scripts/old-glibc.sh %s (scripts/install-test-deps.sh does, as root), or set GPUGUARD_OLD_GLIBC", dir, dir)
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return lib
}

// onOldGlibc runs bin with args under the older glibc's dynamic linker and
// libraries, in dir.
func onOldGlibc(lib, dir, bin string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(lib, "ld-linux-x86-64.so.2"), append([]string{"--library-path", lib, bin}, args...)...)
	cmd.Dir = dir
	return cmd
}

func TestRelease(t *testing.T) {
	tools(t)
	// DIR is relative to the folder release.sh is started from, not to the
	// repository it changes into.
	caller := t.TempDir()
	dist := filepath.Join(caller, "out")
	cmd := exec.Command("bash", absPath(t, "release.sh"), "out")
	cmd.Dir = caller
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("bash scripts/release.sh out, in %s: %v\n%s", caller, err, out)
	}
	t.Logf("release.sh:\n%s", out)
	if !strings.Contains(string(out), "\nout/gpuguard-linux-amd64-nonvml: ") {
		t.Errorf("release.sh does not name its binaries as DIR was given (out/...):\n%s", out)
	}
	nvml := filepath.Join(dist, "gpuguard-linux-amd64")
	static := filepath.Join(dist, "gpuguard-linux-amd64-nonvml")
	if !strings.Contains(string(out), "starts on glibc "+oldest) {
		t.Errorf("release.sh does not say the glibc the NVML build starts on:\n%s", out)
	}

	checkGlibc(t, nvml)
	checkStatic(t, static)
	for _, bin := range []string{nvml, static} {
		if out, err := exec.Command(bin, "version").CombinedOutput(); err != nil || !strings.HasPrefix(string(out), "gpuguard ") {
			t.Errorf("%s version: %v\n%s", bin, err, out)
		}
	}

	t.Run("old glibc", func(t *testing.T) {
		lib := oldGlibc(t)
		work := t.TempDir()
		if out, err := onOldGlibc(lib, work, nvml, "version").CombinedOutput(); err != nil || !strings.HasPrefix(string(out), "gpuguard ") {
			t.Fatalf("%s version on the glibc in %s: %v\n%s", nvml, lib, err, out)
		}
		// doctor asks NVML (dlopen of libnvidia-ml.so.1: absent here, said so)
		// and the system's user and memory facts.
		if out, err := onOldGlibc(lib, work, nvml, "doctor").CombinedOutput(); err != nil || !strings.Contains(string(out), "GPUs:") {
			t.Errorf("%s doctor on the glibc in %s: %v\n%s", nvml, lib, err, out)
		}
		// A run: the job's bytes and exit status come through.
		run := onOldGlibc(lib, work, nvml, "run", "--", "sh", "-c", "echo job-output; exit 3")
		var stdout strings.Builder
		run.Stdout = &stdout
		err := run.Run()
		if code := exitCode(err); code != 3 || !strings.Contains(stdout.String(), "job-output\n") {
			t.Errorf("%s run on the glibc in %s: exit status %d (%v), want the job's 3; stdout:\n%s", nvml, lib, code, err, stdout.String())
		}
	})
}

// The release linker's own start file runs C constructors before main, and
// what it binds to old versions (pthread_create, dlopen) works on both
// glibcs: a cgo program of constructor, thread and dlopen, linked as the
// release is.
func TestReleaseLinker(t *testing.T) {
	tools(t)
	bin := filepath.Join(t.TempDir(), "ctorprobe")
	build := exec.Command("go", "build", "-ldflags", "-linkmode=external -extld="+absPath(t, "release-ld.sh"), "-o", bin, "./testdata/ctorprobe")
	build.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./scripts/testdata/ctorprobe with release-ld.sh: %v\n%s", err, out)
	}
	checkGlibc(t, bin)
	const want = "constructor 42, thread 1, dlopen 1\n"
	if out, err := exec.Command(bin).CombinedOutput(); err != nil || string(out) != want {
		t.Errorf("%s: %v, printed %q, want %q", bin, err, out, want)
	}
	t.Run("old glibc", func(t *testing.T) {
		lib := oldGlibc(t)
		if out, err := onOldGlibc(lib, t.TempDir(), bin).CombinedOutput(); err != nil || string(out) != want {
			t.Errorf("%s on the glibc in %s: %v, printed %q, want %q", bin, lib, err, out, want)
		}
		// Built plainly, the same program is stopped there: what the
		// release linker is for, and the proof that this check can fail.
		plain := filepath.Join(t.TempDir(), "ctorprobe-plain")
		build := exec.Command("go", "build", "-o", plain, "./testdata/ctorprobe")
		build.Env = append(os.Environ(), "CGO_ENABLED=1")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go build ./scripts/testdata/ctorprobe: %v\n%s", err, out)
		}
		if !newestAbove(glibcRefs(t, plain), "2.31") {
			t.Skipf("this machine's glibc is no newer than 2.31: a plain build starts there too")
		}
		out, err := onOldGlibc(lib, t.TempDir(), plain).CombinedOutput()
		if err == nil || !regexp.MustCompile("version `GLIBC_[0-9.]+' not found").Match(out) {
			t.Errorf("a plain build on the glibc in %s: %v, printed %q; want it stopped with version `GLIBC_...' not found", lib, err, out)
		}
	})
}

// newestAbove says whether a version in refs is newer than v.
func newestAbove(refs map[string][]string, v string) bool {
	for r := range refs {
		if newer(r, v) {
			return true
		}
	}
	return false
}

func absPath(t *testing.T, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// exitCode is err's exit status: 0 for nil, -1 when the process did not exit.
func exitCode(err error) int {
	if err == nil {
		return 0
	}
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	return -1
}
