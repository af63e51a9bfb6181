// placeholder: filled in by the issue-5 work.
#include "topology/discovery.h"
