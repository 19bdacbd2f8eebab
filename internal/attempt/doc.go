// Package attempt is the process side of a gpuguard run: one attempt is one
// lifetime of the job's command. It owns
//
//   - starting the command (Start): the PATH lookup in the job's
//     environment, a pseudo-terminal or pipes, a process group or session of
//     its own, Pdeathsig, and the errors that say why a command cannot run
//     (127, 126);
//   - the output pump: every byte to the terminal and output.log in the order
//     the job wrote it, and each line to a scanner that can never hold the job
//     up; a terminal that takes nothing never holds gpuguard up (termqueue.go);
//   - the job's processes (Members): which are the job's (a cgroup of the
//     attempt's own where gpuguard may create one, else its process tree and
//     the orphans gpuguard adopts as the subreaper: cgroup.go, adopt.go),
//     how they are signalled (Signal) and stopped (Shutdown);
//   - the watchdog, a small process that stops the job if gpuguard is killed;
//   - gpuguard as PID 1 (RunAsInit), and its own status lines (Status).
//
// It knows nothing of policies, probes or run directories: the supervisor's
// run loop starts an Attempt, observes its lines, and decides. nomad's
// executor is the model: a narrow interface in front of the processes.
package attempt
