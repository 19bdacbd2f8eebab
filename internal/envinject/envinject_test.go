package envinject

import (
	"reflect"
	"strings"
	"testing"

	"github.com/gpuguard/gpuguard/internal/allocconf"
	"github.com/gpuguard/gpuguard/internal/envlist"
)

func TestMergeDefaults(t *testing.T) {
	tests := []struct {
		name     string
		env      []string
		want     map[string]string // expected values; "<unset>" means absent
		changes  []string          // Change.String() of each change
		kept     int
		warnings []string // substrings, one per warning
	}{
		{
			name:    "nothing set",
			env:     []string{"HOME=/root", "PATH=/bin"},
			want:    map[string]string{VarCUDA: "expandable_segments:True", VarGeneric: "<unset>", VarHIP: "<unset>"},
			changes: []string{"PYTORCH_CUDA_ALLOC_CONF: added expandable_segments:True"},
		},
		{
			name:    "user options kept, ours appended",
			env:     []string{"PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:128"},
			want:    map[string]string{VarCUDA: "max_split_size_mb:128,expandable_segments:True"},
			changes: []string{"PYTORCH_CUDA_ALLOC_CONF: added expandable_segments:True"},
		},
		{
			name: "user choice never overwritten",
			env:  []string{"PYTORCH_CUDA_ALLOC_CONF=expandable_segments:False"},
			want: map[string]string{VarCUDA: "expandable_segments:False"},
			kept: 1,
		},
		{
			name:    "trailing comma and spaces are the user's",
			env:     []string{"PYTORCH_CUDA_ALLOC_CONF= max_split_size_mb : 64 , "},
			want:    map[string]string{VarCUDA: " max_split_size_mb : 64 ,expandable_segments:True"},
			changes: []string{"PYTORCH_CUDA_ALLOC_CONF: added expandable_segments:True"},
		},
		{
			name:    "a trailing comma before a newline is the last one",
			env:     []string{"PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:64,\n"},
			want:    map[string]string{VarCUDA: "max_split_size_mb:64,expandable_segments:True"},
			changes: []string{"PYTORCH_CUDA_ALLOC_CONF: added expandable_segments:True"},
		},
		{
			name:    "bracketed list values parse",
			env:     []string{"PYTORCH_CUDA_ALLOC_CONF=roundup_power2_divisions:[256:1,512:2,>:4],backend:native"},
			want:    map[string]string{VarCUDA: "roundup_power2_divisions:[256:1,512:2,>:4],backend:native,expandable_segments:True"},
			changes: []string{"PYTORCH_CUDA_ALLOC_CONF: added expandable_segments:True"},
		},
		{
			name:    "empty value means no options",
			env:     []string{"PYTORCH_CUDA_ALLOC_CONF="},
			want:    map[string]string{VarCUDA: "expandable_segments:True"},
			changes: []string{"PYTORCH_CUDA_ALLOC_CONF: added expandable_segments:True"},
		},
		{
			name:     "option without value is malformed",
			env:      []string{"PYTORCH_CUDA_ALLOC_CONF=expandable_segments"},
			want:     map[string]string{VarCUDA: "expandable_segments"},
			warnings: []string{`PYTORCH_CUDA_ALLOC_CONF="expandable_segments" is malformed (option "expandable_segments" has no ':value')`},
		},
		{
			name:     "a:b:c is malformed",
			env:      []string{"PYTORCH_CUDA_ALLOC_CONF=a:b:c"},
			want:     map[string]string{VarCUDA: "a:b:c"},
			warnings: []string{`expected ',' after its value, found ":"`},
		},
		{
			name:     "empty key is malformed",
			env:      []string{"PYTORCH_CUDA_ALLOC_CONF=:True"},
			want:     map[string]string{VarCUDA: ":True"},
			warnings: []string{"empty key"},
		},
		{
			name:     "double comma is malformed",
			env:      []string{"PYTORCH_CUDA_ALLOC_CONF=a:1,,b:2"},
			want:     map[string]string{VarCUDA: "a:1,,b:2"},
			warnings: []string{"empty option"},
		},
		{
			name:     "unclosed list is malformed",
			env:      []string{"PYTORCH_CUDA_ALLOC_CONF=roundup_power2_divisions:[256:1"},
			want:     map[string]string{VarCUDA: "roundup_power2_divisions:[256:1"},
			warnings: []string{"no closing ']'"},
		},
		{
			name:     "empty value after colon is malformed",
			env:      []string{"PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:"},
			want:     map[string]string{VarCUDA: "max_split_size_mb:"},
			warnings: []string{"empty value"},
		},
		{
			name: "generic name merged, CUDA name also set",
			env:  []string{"PYTORCH_ALLOC_CONF=garbage_collection_threshold:0.6"},
			want: map[string]string{
				VarGeneric: "garbage_collection_threshold:0.6,expandable_segments:True",
				VarCUDA:    "expandable_segments:True",
			},
			changes: []string{
				"PYTORCH_CUDA_ALLOC_CONF: added expandable_segments:True",
				"PYTORCH_ALLOC_CONF: added expandable_segments:True",
			},
		},
		{
			name: "user value in the generic name wins in the CUDA name too",
			env:  []string{"PYTORCH_ALLOC_CONF=expandable_segments:False"},
			want: map[string]string{
				VarGeneric: "expandable_segments:False",
				VarCUDA:    "expandable_segments:False",
			},
			changes: []string{"PYTORCH_CUDA_ALLOC_CONF: added expandable_segments:False (as set in PYTORCH_ALLOC_CONF)"},
			kept:    1,
		},
		{
			name: "malformed generic name left alone, CUDA name still set",
			env:  []string{"PYTORCH_ALLOC_CONF=expandable_segments"},
			want: map[string]string{
				VarGeneric: "expandable_segments",
				VarCUDA:    "expandable_segments:True",
			},
			changes:  []string{"PYTORCH_CUDA_ALLOC_CONF: added expandable_segments:True"},
			warnings: []string{"PYTORCH_ALLOC_CONF"},
		},
		{
			name: "HIP name merged when used",
			env:  []string{"PYTORCH_HIP_ALLOC_CONF=max_split_size_mb:256"},
			want: map[string]string{
				VarHIP:  "max_split_size_mb:256,expandable_segments:True",
				VarCUDA: "expandable_segments:True",
			},
			changes: []string{
				"PYTORCH_CUDA_ALLOC_CONF: added expandable_segments:True",
				"PYTORCH_HIP_ALLOC_CONF: added expandable_segments:True",
			},
		},
		{
			name:    "duplicate env entries: the last one is the effective one",
			env:     []string{"PYTORCH_CUDA_ALLOC_CONF=expandable_segments:False", "X=1", "PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:64"},
			want:    map[string]string{VarCUDA: "max_split_size_mb:64,expandable_segments:True"},
			changes: []string{"PYTORCH_CUDA_ALLOC_CONF: added expandable_segments:True"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			orig := append([]string(nil), tt.env...)
			res, err := Merge(tt.env, Defaults(), false)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(tt.env, orig) {
				t.Errorf("Merge modified its input: %q", tt.env)
			}
			checkEnv(t, res.Env, tt.want)
			var got []string
			for _, c := range res.Changes {
				got = append(got, c.String())
			}
			if !reflect.DeepEqual(got, tt.changes) {
				t.Errorf("changes = %q, want %q", got, tt.changes)
			}
			if len(res.Kept) != tt.kept {
				t.Errorf("kept = %v, want %d entries", res.Kept, tt.kept)
			}
			if len(res.Warnings) != len(tt.warnings) {
				t.Fatalf("warnings = %q, want %d", res.Warnings, len(tt.warnings))
			}
			for i, w := range tt.warnings {
				if !strings.Contains(res.Warnings[i], w) {
					t.Errorf("warning %q does not contain %q", res.Warnings[i], w)
				}
			}
		})
	}
}

func TestMergeOverride(t *testing.T) {
	tests := []struct {
		name    string
		env     []string
		opts    []allocconf.Option
		want    map[string]string
		changes []string
	}{
		{
			name:    "policy value replaces the user's, reported old→new",
			env:     []string{"PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:512,expandable_segments:False"},
			opts:    []allocconf.Option{{Key: "max_split_size_mb", Value: "128"}, {Key: "expandable_segments", Value: "True"}},
			want:    map[string]string{VarCUDA: "max_split_size_mb:128,expandable_segments:True"},
			changes: []string{"PYTORCH_CUDA_ALLOC_CONF: max_split_size_mb 512→128", "PYTORCH_CUDA_ALLOC_CONF: expandable_segments False→True"},
		},
		{
			name:    "spaces around the value stay",
			env:     []string{"PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb : 512 ,backend:native"},
			opts:    []allocconf.Option{{Key: "max_split_size_mb", Value: "64"}},
			want:    map[string]string{VarCUDA: "max_split_size_mb : 64 ,backend:native"},
			changes: []string{"PYTORCH_CUDA_ALLOC_CONF: max_split_size_mb 512→64"},
		},
		{
			name:    "a list value replaces a scalar",
			env:     []string{"PYTORCH_CUDA_ALLOC_CONF=roundup_power2_divisions:4"},
			opts:    []allocconf.Option{{Key: "roundup_power2_divisions", Value: "[256:1,>:4]"}},
			want:    map[string]string{VarCUDA: "roundup_power2_divisions:[256:1,>:4]"},
			changes: []string{"PYTORCH_CUDA_ALLOC_CONF: roundup_power2_divisions 4→[256:1,>:4]"},
		},
		{
			name:    "same value is not a change",
			env:     []string{"PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"},
			opts:    []allocconf.Option{{Key: "expandable_segments", Value: "True"}},
			want:    map[string]string{VarCUDA: "expandable_segments:True"},
			changes: nil,
		},
		{
			name: "both names get the policy value",
			env:  []string{"PYTORCH_ALLOC_CONF=garbage_collection_threshold:0.9", "PYTORCH_CUDA_ALLOC_CONF=garbage_collection_threshold:0.9"},
			opts: []allocconf.Option{{Key: "garbage_collection_threshold", Value: "0.6"}},
			want: map[string]string{
				VarGeneric: "garbage_collection_threshold:0.6",
				VarCUDA:    "garbage_collection_threshold:0.6",
			},
			changes: []string{
				"PYTORCH_CUDA_ALLOC_CONF: garbage_collection_threshold 0.9→0.6",
				"PYTORCH_ALLOC_CONF: garbage_collection_threshold 0.9→0.6",
			},
		},
		{
			name:    "duplicate keys are all replaced",
			env:     []string{"PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:512,max_split_size_mb:256"},
			opts:    []allocconf.Option{{Key: "max_split_size_mb", Value: "64"}},
			want:    map[string]string{VarCUDA: "max_split_size_mb:64,max_split_size_mb:64"},
			changes: []string{"PYTORCH_CUDA_ALLOC_CONF: max_split_size_mb 256→64"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := Merge(tt.env, tt.opts, true)
			if err != nil {
				t.Fatal(err)
			}
			checkEnv(t, res.Env, tt.want)
			var got []string
			for _, c := range res.Changes {
				got = append(got, c.String())
			}
			if !reflect.DeepEqual(got, tt.changes) {
				t.Errorf("changes = %q, want %q", got, tt.changes)
			}
		})
	}
}

func TestMergeOverrideMalformedUntouched(t *testing.T) {
	env := []string{"PYTORCH_CUDA_ALLOC_CONF=a:b:c"}
	res, err := Merge(env, []allocconf.Option{{Key: "max_split_size_mb", Value: "64"}}, true)
	if err != nil {
		t.Fatal(err)
	}
	checkEnv(t, res.Env, map[string]string{VarCUDA: "a:b:c"})
	if len(res.Changes) != 0 || len(res.Warnings) != 1 {
		t.Fatalf("changes %v warnings %q", res.Changes, res.Warnings)
	}
}

func TestMergeInvalidOptions(t *testing.T) {
	for _, o := range []allocconf.Option{{Key: "", Value: "1"}, {Key: "a:b", Value: "1"}, {Key: "a", Value: ""}, {Key: "a", Value: "1,2"}, {Key: "a", Value: "x y"}, {Key: "a", Value: "[1:2"}, {Key: "a", Value: "[]"}} {
		env := []string{"A=1"}
		res, err := Merge(env, []allocconf.Option{o}, false)
		if err == nil {
			t.Errorf("Merge(%+v) accepted an invalid option", o)
		}
		if !reflect.DeepEqual(res.Env, env) {
			t.Errorf("Merge(%+v) changed env on error: %q", o, res.Env)
		}
	}
	if _, err := Merge(nil, []allocconf.Option{{Key: "roundup_power2_divisions", Value: "[256:1,>:4]"}}, false); err != nil {
		t.Errorf("list value rejected: %v", err)
	}
}

func checkEnv(t *testing.T, env []string, want map[string]string) {
	t.Helper()
	for k, w := range want {
		v, ok := envlist.Lookup(env, k)
		if w == "<unset>" {
			if ok {
				t.Errorf("%s=%q, want unset", k, v)
			}
			continue
		}
		if !ok || v != w {
			t.Errorf("%s=%q (set %v), want %q", k, v, ok, w)
		}
	}
}
