package limiter_test

import (
	"github.com/shaper-dev/shaper/limiter"
	"github.com/shaper-dev/shaper/shaper"
)

// Limiter is what the pipeline's scheduler asks for departure times.
var _ shaper.Limiter = (*limiter.Limiter)(nil)
