// placeholder: filled in by the issue-5 work.
#include "collectives/select.h"
