// Package envinject composes a training job's environment: it merges
// allocator options into the user's own PYTORCH_CUDA_ALLOC_CONF (and its
// sibling variables) without ever overwriting what the user chose, and it
// offers an "override" merge for policy actions, where the policy's values win
// and every replaced value is reported as old→new.
//
// Values are read and edited with package allocconf, in PyTorch's syntax. A
// value PyTorch would reject is malformed: Merge leaves such a variable
// exactly as the user wrote it and says so in Result.Warnings.
package envinject

import (
	"fmt"
	"strings"

	"github.com/gpuguard/gpuguard/internal/allocconf"
)

// The variables PyTorch reads its caching-allocator options from.
const (
	// VarCUDA is read by every PyTorch version with CUDA; since 2.9 it is a
	// deprecated alias of VarGeneric that is read only when VarGeneric is
	// unset.
	VarCUDA = "PYTORCH_CUDA_ALLOC_CONF"
	// VarGeneric is the device-generic name (PyTorch 2.9+); when set it takes
	// precedence over VarCUDA. Older versions ignore it.
	VarGeneric = "PYTORCH_ALLOC_CONF"
	// VarHIP is read by ROCm builds.
	VarHIP = "PYTORCH_HIP_ALLOC_CONF"
)

// Defaults returns the options gpuguard adds when the user has not set them:
// expandable_segments:True, which lets the allocator grow segments instead of
// fragmenting memory into many fixed-size blocks.
func Defaults() []allocconf.Option {
	return []allocconf.Option{{Key: "expandable_segments", Value: "True"}}
}

// Change is one option Merge added, replaced or kept in one variable.
type Change struct {
	Var    string // the environment variable
	Option string // the option key
	Old    string // the value before; "" when the option was added
	New    string // the value after
	// From names the other variable whose user-set value was copied, when
	// the user set the option there but not in Var (keeps the variables
	// consistent whichever one PyTorch reads).
	From string
}

func (c Change) String() string {
	switch {
	case c.Old == "" && c.From != "":
		return fmt.Sprintf("%s: added %s:%s (as set in %s)", c.Var, c.Option, c.New, c.From)
	case c.Old == "":
		return fmt.Sprintf("%s: added %s:%s", c.Var, c.Option, c.New)
	case c.Old == c.New:
		return fmt.Sprintf("%s: kept %s:%s", c.Var, c.Option, c.Old)
	default:
		return fmt.Sprintf("%s: %s %s→%s", c.Var, c.Option, c.Old, c.New)
	}
}

// Result is the outcome of Merge.
type Result struct {
	// Env is the complete new environment (KEY=VALUE), in the input's order
	// with new variables appended. The input slice is never modified.
	Env []string
	// Changes lists every option added or replaced.
	Changes []Change
	// Kept lists the options the user had already set, which a non-override
	// merge left alone (Old == New).
	Kept []Change
	// Warnings are user-facing sentences about values left untouched because
	// they are malformed.
	Warnings []string
}

// Merge returns env with opts merged into the allocator variables.
//
// VarCUDA is always set (created when absent), because some PyTorch versions
// read only that name; VarGeneric and VarHIP are merged only when the user set
// them. Without override, an option the user already set in a variable is
// kept; when the user set it only in a sibling variable, that value is copied
// rather than the default, so that whichever variable PyTorch reads agrees
// with the user. With override (policy actions), opts replace existing values
// in every variable merged, each replacement reported old→new.
//
// A malformed user value is left exactly as written and reported in Warnings;
// nothing is added to that variable. Merge returns an error only when opts
// themselves are invalid (an empty key or value, or one containing ',', ':'
// or whitespace outside a bracketed list); env is then not changed.
func Merge(env []string, opts []allocconf.Option, override bool) (Result, error) {
	for _, o := range opts {
		if err := o.Check(); err != nil {
			return Result{Env: append([]string(nil), env...)}, fmt.Errorf("envinject: %w", err)
		}
	}
	res := Result{Env: append([]string(nil), env...)}
	if len(opts) == 0 {
		return res, nil
	}

	type varState struct {
		name  string
		idx   int // index in res.Env of the effective (last) entry, -1 if unset
		value string
		user  allocconf.List // the user's own options, as found; nil when unset or malformed
		bad   bool
	}
	vars := []*varState{{name: VarCUDA}, {name: VarGeneric}, {name: VarHIP}}
	for _, v := range vars {
		v.idx = -1
		for i, kv := range res.Env {
			if k, val, ok := strings.Cut(kv, "="); ok && k == v.name {
				v.idx, v.value = i, val
			}
		}
		if v.idx < 0 {
			continue
		}
		l, err := allocconf.Parse(v.value)
		if err != nil {
			v.bad = true
			res.Warnings = append(res.Warnings, fmt.Sprintf(
				"%s=%q is malformed (%v); left as written, no allocator option added to it", v.name, v.value, err))
			continue
		}
		v.user = l
	}

	// userValue finds the value the user set for key in any well-formed
	// variable other than skip, preferring the one PyTorch gives precedence.
	userValue := func(key string, skip *varState) (string, string, bool) {
		for _, v := range []*varState{vars[1], vars[0], vars[2]} {
			if v == skip {
				continue
			}
			if val, ok := v.user.Get(key); ok {
				return val, v.name, true
			}
		}
		return "", "", false
	}

	for _, v := range vars {
		if v.bad || (v.idx < 0 && v.name != VarCUDA) {
			continue
		}
		value, cur := v.value, v.user // VarCUDA unset: start from an empty value
		for _, o := range opts {
			old, has := cur.Get(o.Key)
			newValue, from := o.Value, ""
			switch {
			case has && !override:
				res.Kept = append(res.Kept, Change{Var: v.name, Option: o.Key, Old: old, New: old})
				continue
			case has && old == o.Value:
				continue // override to the value already there: nothing to report
			case has:
				res.Changes = append(res.Changes, Change{Var: v.name, Option: o.Key, Old: old, New: o.Value})
			default:
				if !override {
					if uv, name, ok := userValue(o.Key, v); ok {
						newValue, from = uv, name
					}
				}
				res.Changes = append(res.Changes, Change{Var: v.name, Option: o.Key, New: newValue, From: from})
			}
			var err error
			if value, err = allocconf.Set(value, o.Key, newValue); err == nil {
				cur, err = allocconf.Parse(value) // later options see the new value
			}
			if err != nil {
				return Result{Env: append([]string(nil), env...)}, fmt.Errorf("envinject: internal error: merged %s=%q does not parse: %v", v.name, value, err)
			}
		}
		if v.idx >= 0 {
			res.Env[v.idx] = v.name + "=" + value
		} else {
			res.Env = append(res.Env, v.name+"="+value)
		}
	}
	return res, nil
}
