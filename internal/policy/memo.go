package policy

import (
	"path"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// The memo's key (the supervisor's memo.go) names the command by MemoCommand:
// without its resume arguments and with its volatile arguments masked, so
// that a job whose command names a per-run output directory, log
// directory, run name or seed (an sbatch script with $SLURM_JOB_ID in a
// path) matches its own memo.

// volatileFlags are the flags (and key=value keys, without their dashes)
// whose values change from run to run without changing what fits: output,
// log and checkpoint directories, run names, seeds.
var volatileFlags = []string{
	"output_dir", "output-dir", "outdir", "out_dir", "out-dir", "output", "out",
	"log_dir", "log-dir", "logdir", "logging_dir", "logging-dir", "log",
	"save_dir", "save-dir", "checkpoint_dir", "checkpoint-dir", "ckpt_dir", "ckpt-dir", "default_root_dir",
	"run_name", "run-name", "name", "exp_name", "exp-name", "experiment_name", "experiment-name", "project",
	"seed", "random_seed", "random-seed", "data_seed", "data-seed",
	"trainer.default_root_dir", "hydra.run.dir", "hydra.sweep.dir",
}

// memoMask replaces a volatile argument's value in the memo's key.
const memoMask = "<volatile>"

// MemoIgnore is the policy's memo: {ignore: [...]}: more flags or
// key=value keys whose values the memo's key leaves out.
func (p *Policy) MemoIgnore() []string { return slices.Clone(p.memoIgnore) }

// MemoCommand is argv as the memo keys it: WithoutResume, and with the
// values of volatile arguments masked: the output, log and checkpoint
// directories, run names and seeds (volatileFlags, in any of the forms
// --flag VALUE, --flag=VALUE, -flag VALUE, key=VALUE, +key=VALUE), the
// flags and keys of the policy's memo: {ignore: [...]}, and any word that is
// a path inside the directory of a checkpoint glob (runs/1234/ckpt.pt under
// checkpoints: {globs: [runs/*/ckpt.pt]}). masked lists what was masked,
// for messages.
func (p *Policy) MemoCommand(argv []string) (out, masked []string) {
	out = p.WithoutResume(argv)
	out = slices.Clone(out)
	names := append(slices.Clone(volatileFlags), p.memoIgnore...)
	isVolatile := func(name string) bool {
		name = strings.TrimLeft(name, "-+")
		return slices.Contains(names, name) || slices.ContainsFunc(p.memoIgnore, func(n string) bool {
			return strings.TrimLeft(n, "-+") == name
		})
	}
	dirs := p.ckptDirs()
	for i := 1; i < len(out); i++ {
		w := out[i]
		if strings.HasPrefix(w, "-") {
			name, val, eq := strings.Cut(w, "=")
			if !isVolatile(name) {
				continue
			}
			if eq {
				out[i] = name + "=" + memoMask
				masked = append(masked, name+"="+val)
			} else if i+1 < len(out) && !isFlagWord(out[i+1]) {
				masked = append(masked, name+" "+out[i+1])
				out[i+1] = memoMask
				i++
			}
			continue
		}
		if key, val, eq := strings.Cut(w, "="); eq && isVolatile(key) {
			out[i] = key + "=" + memoMask
			masked = append(masked, key+"="+val)
			continue
		}
		if inDirs(w, dirs) {
			out[i] = memoMask
			masked = append(masked, w)
		}
	}
	// The knobs named in the checkpoint globs ({output_dir}/checkpoint-*)
	// hold the checkpoints' directory: their values are volatile too.
	for _, k := range p.ckptKnobs() {
		if k.where != whereFlag {
			continue
		}
		for _, o := range findFlag(out, k.flags) {
			if out[o.idx] != o.prefix+memoMask {
				masked = append(masked, strings.TrimSuffix(o.flag+" "+o.value, " "))
				out[o.idx] = o.prefix + memoMask
			}
		}
	}
	return out, masked
}

// ckptDirs are the fixed directories of the checkpoint globs: the path up
// to the first part with a wildcard or a {knob}.
func (p *Policy) ckptDirs() []string {
	var dirs []string
	for _, g := range p.ckpt.Globs {
		parts := strings.Split(path.Clean(g), "/")
		n := 0
		for n < len(parts)-1 && !strings.ContainsAny(parts[n], "*?[{") {
			n++
		}
		if n > 0 {
			dirs = append(dirs, strings.Join(parts[:n], "/"))
		}
	}
	return dirs
}

// ckptKnobs are the knobs the checkpoint globs name in braces.
func (p *Policy) ckptKnobs() []*knob {
	var out []*knob
	for _, g := range p.ckpt.Globs {
		for _, k := range p.knobs {
			if strings.Contains(g, "{"+k.name+"}") && !slices.Contains(out, k) {
				out = append(out, k)
			}
		}
	}
	return out
}

// inDirs: w is a path inside one of dirs (not the directory itself, which
// is the same for every run).
func inDirs(w string, dirs []string) bool {
	if w == "" || strings.ContainsAny(w, " \t") {
		return false
	}
	c := path.Clean(strings.TrimPrefix(w, "./"))
	for _, d := range dirs {
		if strings.HasPrefix(c, d+"/") {
			return true
		}
	}
	return false
}

// memoSpec reads the policy's memo key: true or false, or {ignore: [...]}
// (which turns the memo on) with the flags and keys whose values the memo
// leaves out of its key.
func (w *walker) memoSpec(n *yaml.Node, p *Policy) {
	if n.Kind != yaml.MappingNode {
		p.memo = w.boolean(n, "memo")
		return
	}
	p.memo = true
	for _, f := range w.mapping(n, "memo", "ignore", "on") {
		switch f.name {
		case "ignore":
			p.memoIgnore = w.strList(f.val, "memo: ignore")
		case "on":
			p.memo = w.boolean(f.val, "memo: on")
		}
	}
}
