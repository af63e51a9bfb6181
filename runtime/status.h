// Forwarding header (issue 12): the definitions moved to common/status.h; include that instead.
#pragma once
#include "common/status.h"
