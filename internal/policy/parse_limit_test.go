package policy

import (
	"bytes"
	"strings"
	"testing"
)

// Issue 23, finding 9: a policy is bounded. presets.Load reads no more than
// MaxFileBytes of a file; Parse refuses more from any other source.
func TestParseRefusesOversizedPolicy(t *testing.T) {
	ok := []byte("version: 1\n")
	data := append(bytes.Clone(ok), bytes.Repeat([]byte("#\n"), (MaxFileBytes-len(ok))/2+1)...)
	_, err := Parse("big.yaml", data)
	if err == nil || !strings.HasPrefix(err.Error(), "big.yaml:1:1: policy file is ") || !strings.Contains(err.Error(), "(4 MiB)") {
		t.Errorf("oversized policy: %v", err)
	}
	// At the limit it is parsed (and refused for what it says, not its size).
	_, err = Parse("full.yaml", data[:MaxFileBytes])
	if err != nil && strings.Contains(err.Error(), "4 MiB") {
		t.Errorf("policy at the limit: %v", err)
	}
}
