package record

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// state.json holds the command with its secrets masked; the state in memory
// keeps it whole, and the file still reads back.
func TestStateArgvRedacted(t *testing.T) {
	argv := []string{"python", "train.py", "--api-key=s3cr3t", "--token", "abc", "https://u:pw@host/x", "HF_TOKEN=zzz", "--lr", "1e-4"}
	st := RunState[struct{}]{Version: 1, Argv: slices.Clone(argv)}
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{"s3cr3t", "abc", "pw@", "zzz"} {
		if strings.Contains(string(data), secret) {
			t.Errorf("state.json holds %q:\n%s", secret, data)
		}
	}
	var back RunState[struct{}]
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	want := []string{"python", "train.py", "--api-key=***", "--token", "***", "https://u:***@host/x", "HF_TOKEN=***", "--lr", "1e-4"}
	if !slices.Equal(back.Argv, want) {
		t.Errorf("read back %q, want %q", back.Argv, want)
	}
	if !slices.Equal(st.Argv, argv) {
		t.Errorf("marshalling changed the state's argv: %q", st.Argv)
	}
}
