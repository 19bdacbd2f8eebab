package policy

import (
	"net/url"

	"go.yaml.in/yaml/v3"
)

// Notify is the policy's notify: section: where gpuguard run sends its
// notifications (docs/notify.md) when neither --notify nor --notify-command
// (nor their environment variables) is given.
type Notify struct {
	URL     string // POST each notification here
	Command string // run `sh -c Command` with each notification on stdin
}

// Notify returns the policy's notify: section (empty without one).
func (p *Policy) Notify() Notify { return p.notify }

// notifySpec reads the notify: section: url (http or https, with a host)
// and/or command.
func (w *walker) notifySpec(n *yaml.Node, s *Notify) {
	fields := w.mapping(n, "notify", "url", "command")
	for _, f := range fields {
		switch f.name {
		case "url":
			s.URL = w.str(f.val, "notify url")
			if u, err := url.Parse(s.URL); s.URL != "" && (err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "") {
				w.at(f.val, "notify url %q must be an http:// or https:// URL with a host", s.URL)
			}
		case "command":
			s.Command = w.str(f.val, "notify command")
		}
	}
	if resolve(n).Kind == yaml.MappingNode && len(fields) == 0 {
		w.at(n, "notify needs url, command or both")
	}
}
