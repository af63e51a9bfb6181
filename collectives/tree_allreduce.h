// placeholder: filled in by the issue-5 work.
#pragma once
