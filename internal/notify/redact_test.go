package notify

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/gpuguard/gpuguard/internal/probes/classify"
	"github.com/gpuguard/gpuguard/internal/rundir/record"
)

// No document, posted or piped, holds a secret given on the command line,
// nor does the line that says a notify command failed, though the command
// itself was given its token.
func TestSecretsNotSent(t *testing.T) {
	s, srv := newSink(t, http.StatusOK)
	dir := t.TempDir()
	piped := filepath.Join(dir, "piped")
	var warns []string
	var mu sync.Mutex
	cmd := `cat >> "$PIPED"; echo "$GPUGUARD_TEXT" >> "$PIPED"; echo "got $HOOK_TOKEN" >> "$PIPED.token"; echo "curl: (22) Authorization: Bearer $HOOK_TOKEN refused" >&2; exit 22 # Authorization: Bearer hooktok`
	t.Setenv("PIPED", piped)
	t.Setenv("HOOK_TOKEN", "hooktok")
	n := Start(Config{URL: srv.URL, Command: cmd, Warn: func(m string) { mu.Lock(); warns = append(warns, m); mu.Unlock() }})
	argv := []string{"python", "train.py", "--api-key=s3cr3t", "--token", "abc", "https://u:pw@host/x", "HF_TOKEN=zzz"}
	feed(n, []record.Event{
		record.RunStart{Argv: argv, RunDir: "/runs/r1"},
		record.AttemptStart{Attempt: 1, Argv: argv},
		record.AttemptEnd{Attempt: 1, ExitCode: 1, Verdict: &classify.Verdict{Kind: classify.KindGPUOOM}},
		record.Decision{Attempt: 1, Verb: "give_up", Reason: "cannot relaunch train.py --token abc"},
		record.RunEnd{ExitCode: 1},
	})
	n.Close()
	pipedData, err := os.ReadFile(piped)
	if err != nil {
		t.Fatal(err)
	}
	if tok, _ := os.ReadFile(piped + ".token"); !strings.Contains(string(tok), "got hooktok") {
		t.Fatalf("the notify command did not get its own token: %q", tok)
	}
	mu.Lock()
	defer mu.Unlock()
	all := map[string]string{"webhook": strings.Join(s.raw, "\n"), "command": string(pipedData), "warnings": strings.Join(warns, "\n")}
	if len(s.docs) != 3 || !strings.Contains(all["webhook"], `"--api-key=***"`) || !strings.Contains(all["command"], "--token ***") {
		t.Errorf("documents %s", all["webhook"])
	}
	if !strings.Contains(all["warnings"], "exit status 22") {
		t.Errorf("warnings %q", warns)
	}
	for where, text := range all {
		for _, secret := range []string{"s3cr3t", "abc", "pw@", "zzz", "hooktok"} {
			if strings.Contains(text, secret) {
				t.Errorf("%s holds %q:\n%s", where, secret, text)
			}
		}
	}
}
