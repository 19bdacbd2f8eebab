// Package checkpoint observes a job's checkpoints: it finds them in the
// directories a policy names and tells a complete one from one still being
// written (Scan), orders them and chooses the one to resume from (Better,
// Select: the one order every caller uses), watches the directories with
// fsnotify while the job runs (Watch), and reads what the job's output says
// of its checkpoints (a save under way, the path it saved). It decides
// nothing about relaunching.
package checkpoint
