package main

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// The benchmark trusts three properties of flood mode: it writes exactly
// -mb MiB plus "\ndone\n", the same bytes every time, and -onlcr is the same
// stream with each '\n' as "\r\n" (what a pty master yields).
func TestFloodIsExactAndDeterministic(t *testing.T) {
	const n = 3<<20 + 12345 // not a multiple of the block or of the write size
	var a, b, c bytes.Buffer
	if err := flood(&a, n, 4096, false); err != nil {
		t.Fatal(err)
	}
	if err := flood(&b, n, 1000, false); err != nil {
		t.Fatal(err)
	}
	if err := flood(&c, n, 4096, true); err != nil {
		t.Fatal(err)
	}
	if got, want := a.Len(), n+len("\ndone\n"); got != want {
		t.Fatalf("flood wrote %d bytes, want %d", got, want)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Fatal("flood's output depends on the write size")
	}
	if !bytes.HasSuffix(a.Bytes(), []byte("\ndone\n")) {
		t.Fatalf("flood's output ends %q, want the done line", a.Bytes()[a.Len()-20:])
	}
	if bytes.Count(a.Bytes(), []byte("\r\n")) != 0 {
		t.Fatal(`plain output holds "\r\n"; -onlcr could not be told from it`)
	}
	want := bytes.ReplaceAll(a.Bytes(), []byte("\n"), []byte("\r\n"))
	if !bytes.Equal(c.Bytes(), want) {
		t.Fatal(`-onlcr output is not the plain output with "\r\n" for each '\n'`)
	}
	// Both kinds of output the benchmark stands for are there.
	if !bytes.Contains(a.Bytes(), []byte("\rEpoch ")) || !bytes.Contains(a.Bytes(), []byte("step=")) {
		t.Fatal("flood's output lacks progress bars or log lines")
	}
}

// A chunk that ends right after a '\n' and one that begins with it both
// come out right.
func TestCRLF(t *testing.T) {
	for in, want := range map[string]string{
		"":           "",
		"a":          "a",
		"\n":         "\r\n",
		"a\nb\n\nc":  "a\r\nb\r\n\r\nc",
		"\rbar\nx\n": "\rbar\r\nx\r\n",
	} {
		if got := string(crlf([]byte("p:"), []byte(in))); got != "p:"+want {
			t.Errorf("crlf(%q) = %q, want %q", in, got, "p:"+want)
		}
	}
}

// Paced mode, run as the real command: bars redrawn with '\r', log lines,
// and the done line at the end, exit status 0.
func TestPacedRunsAndEnds(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs chatty for half a second")
	}
	bin := t.TempDir() + "/chatty"
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "-for", "500ms", "-bar-hz", "50", "-line-hz", "20").Output()
	if err != nil {
		t.Fatalf("chatty -for 500ms: %v", err)
	}
	s := string(out)
	if !strings.HasSuffix(s, "\ndone\n") {
		t.Fatalf("output does not end with the done line: %q", s[max(0, len(s)-80):])
	}
	if !strings.Contains(s, "\rEpoch 0: ") || !strings.Contains(s, "{'loss': ") {
		t.Fatalf("output lacks a bar or a log line: %q", s)
	}

	// A reader that goes away is an error, not a silent success.
	cmd := exec.Command(bin, "-for", "10s")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	// Wait for its first write, then close the read side.
	buf := make([]byte, 1)
	if _, err := r.Read(buf); err != nil {
		t.Fatal(err)
	}
	r.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("chatty exited 0 after its reader went away")
		}
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatal("chatty did not stop after its reader went away")
	}
}
