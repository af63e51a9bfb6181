// Forwarding header (issue 12): the definitions moved to common/step_stats.h; include that instead.
#pragma once
#include "common/step_stats.h"
