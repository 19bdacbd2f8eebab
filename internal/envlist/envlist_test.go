package envlist

import (
	"slices"
	"testing"
)

func TestLookup(t *testing.T) {
	env := []string{"A=1", "B=", "A=2", "NOEQUALS", "C=x=y"}
	cases := []struct {
		key   string
		val   string
		isSet bool
	}{
		{"A", "2", true}, // the last entry wins, as in os/exec
		{"B", "", true},
		{"C", "x=y", true},
		{"NOEQUALS", "", false},
		{"D", "", false},
		{"", "", false},
	}
	for _, c := range cases {
		v, ok := Lookup(env, c.key)
		if v != c.val || ok != c.isSet {
			t.Errorf("Lookup(%q) = %q, %v; want %q, %v", c.key, v, ok, c.val, c.isSet)
		}
		if g := Get(env, c.key); g != c.val {
			t.Errorf("Get(%q) = %q", c.key, g)
		}
	}
}

func TestSetKeepsPlaceAndInput(t *testing.T) {
	env := []string{"A=1", "B=2", "A=3", "C=4"}
	orig := slices.Clone(env)
	cases := []struct {
		key, val string
		want     []string
	}{
		{"A", "9", []string{"A=9", "B=2", "C=4"}},
		{"C", "", []string{"A=1", "B=2", "A=3", "C="}},
		{"D", "5", []string{"A=1", "B=2", "A=3", "C=4", "D=5"}},
	}
	for _, c := range cases {
		if got := Set(env, c.key, c.val); !slices.Equal(got, c.want) {
			t.Errorf("Set(%q, %q) = %q, want %q", c.key, c.val, got, c.want)
		}
	}
	if !slices.Equal(env, orig) {
		t.Errorf("Set modified its input: %q", env)
	}
}

func TestUnset(t *testing.T) {
	env := []string{"A=1", "AB=2", "B=3", "A=4"}
	if got, want := Unset(env, "A", "B"), []string{"AB=2"}; !slices.Equal(got, want) {
		t.Errorf("Unset = %q, want %q", got, want)
	}
	if got := Unset(env); !slices.Equal(got, env) {
		t.Errorf("Unset with no keys = %q", got)
	}
}
