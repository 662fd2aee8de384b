// Package profilingtest is an in-test HTTP endpoint that speaks the part of
// Pyroscope's ingest API that pyroscope-go uses — POST /ingest?name=<app>{tags}
// with the pprof in a multipart "profile" file — and keeps what it
// received, parsed with github.com/google/pprof/profile.
package profilingtest

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync"

	"github.com/google/pprof/profile"
)

// Upload is one profile received.
type Upload struct {
	// Name is the application name with its tags: app{k=v,…}.
	Name    string
	Profile *profile.Profile
}

// Server records uploads; Close it when done.
type Server struct {
	*httptest.Server
	mu      sync.Mutex
	uploads []Upload
	errs    []error
}

// New starts a Server on a loopback port.
func New() *Server {
	s := &Server{}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/ingest" {
		http.NotFound(w, r)
		return
	}
	p, err := parse(r)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.errs = append(s.errs, err)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.uploads = append(s.uploads, Upload{Name: r.URL.Query().Get("name"), Profile: p})
}

func parse(r *http.Request) (*profile.Profile, error) {
	file, _, err := r.FormFile("profile")
	if err != nil {
		return nil, err
	}
	raw, err := io.ReadAll(file)
	if err != nil {
		return nil, err
	}
	return profile.ParseData(raw)
}

// Uploads returns what was received so far, and the requests it could not
// read.
func (s *Server) Uploads() ([]Upload, []error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Upload(nil), s.uploads...), append([]error(nil), s.errs...)
}

// Labels returns the values of label key on the samples of profiles with a
// sample type named sampleType.
func (s *Server) Labels(sampleType, key string) map[string]bool {
	uploads, _ := s.Uploads()
	values := map[string]bool{}
	for _, u := range uploads {
		if !hasType(u.Profile, sampleType) {
			continue
		}
		for _, sample := range u.Profile.Sample {
			for _, v := range sample.Label[key] {
				values[v] = true
			}
		}
	}
	return values
}

func hasType(p *profile.Profile, sampleType string) bool {
	for _, st := range p.SampleType {
		if st.Type == sampleType {
			return true
		}
	}
	return false
}
