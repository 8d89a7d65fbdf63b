package app

import (
	"strconv"

	"github.com/sluice-rl/sluice/record"
	"github.com/sluice-rl/sluice/respserver"
)

// startRecording opens --record's file, when set, for the service to
// record decisions to; it is closed last, once every door has drained.
func (s *Sidecar) startRecording() error {
	rc := s.cfg.Record
	if rc.Path == "" {
		return nil
	}
	cfg := record.Config{Path: rc.Path, Sample: rc.Sample, MaxSize: int64(rc.MaxSize), Keep: rc.Keep, ClearKeys: rc.Keys == "clear"}
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
	s.log.Info("recording decisions", "file", rc.Path, "sample", rc.Sample, "max_size", rc.MaxSize.String(), "keep", rc.Keep, "keys", rc.Keys)
	return nil
}

// recordInfo is INFO's Recording section: the file, and how many
// decisions were recorded, dropped and lost.
func (s *Sidecar) recordInfo() respserver.InfoSection {
	return respserver.InfoSection{Name: "Recording", Fields: func() [][2]string {
		if s.rec == nil {
			return [][2]string{{"recording", "0"}}
		}
		st := s.rec.Stats()
		u := func(n uint64) string { return strconv.FormatUint(n, 10) }
		return [][2]string{{"recording", "1"}, {"recording_file", st.Path}, {"recording_sample", strconv.Itoa(st.Sample)},
			{"recording_keys", s.cfg.Record.Keys}, {"recorded_decisions", u(st.Recorded)}, {"recording_dropped", u(st.Dropped)},
			{"recording_failed", u(st.Failed)}, {"recording_bytes", u(st.Bytes)}, {"recording_rotations", u(st.Rotations)},
			{"recording_last_error", st.LastError}}
	}}
}
