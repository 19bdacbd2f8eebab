package attempt

import "syscall"

// ForwardedSignals are the signals gpuguard passes on to the job: the run's
// signal forwarder sends them to the attempt running (Attempt.Signal), and
// gpuguard as PID 1 to gpuguard proper.
var ForwardedSignals = []syscall.Signal{
	syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2,
}
