package app

import (
	"github.com/sluice-rl/sluice/record"
)

// startRecording opens --record's file, when set, for the service to
// record decisions to; it is closed last, once every door has drained.
func (s *Sidecar) startRecording() error {
	rc := s.cfg.Record
	if rc.Path == "" {
		return nil
	}
	cfg := record.Config{Path: rc.Path, Sample: rc.Sample, MaxRate: rc.MaxRate, MaxSize: int64(rc.MaxSize), Keep: rc.Keep, ClearKeys: rc.Keys == "clear",
		OnSample: func(sample int, rate float64) {
			s.log.Warn("recording fewer keys: the decisions sampled came faster than --record-max-rate; the sample stays raised until restart",
				"file", rc.Path, "sample", sample, "decisions_per_second", int64(rate), "max_rate", rc.MaxRate)
		}}
	if rc.Salt != "" {
		cfg.Salt = []byte(rc.Salt)
	}
	w, err := record.New(cfg)
	if err != nil {
		return err
	}
	s.rec = w
	s.closers = append(s.closers, func() {
		if err := w.Close(); err != nil {
			s.log.Warn("the recording's file was not written whole", "file", rc.Path, "err", err)
		}
	})
	s.log.Info("recording decisions", "file", rc.Path, "sample", rc.Sample, "max_rate", rc.MaxRate, "max_size", rc.MaxSize.String(), "keep", rc.Keep, "keys", rc.Keys)
	return nil
}
