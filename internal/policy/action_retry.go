package policy

// retryAction is `retry: true`: it relaunches the job unchanged, and always
// acts (a step's times: bounds it).
type retryAction struct{}

func parseRetry(w *walker, in actionInput) action {
	if !w.boolean(in.verb.val, in.what+": retry") {
		w.at(in.verb.val, "%s: retry: false does nothing; remove the step", in.what)
	}
	return retryAction{}
}

func (retryAction) verb() string                                                { return "retry" }
func (retryAction) numericKnobs() []string                                      { return nil }
func (retryAction) envVars() []string                                           { return nil }
func (retryAction) apply(p *Policy, vals Values, _ *Outcome) ([]Change, string) { return nil, "" }
