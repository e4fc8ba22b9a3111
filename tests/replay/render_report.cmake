# Renders an HTML replay report in headless Chromium and checks the
# screenshot is not blank. Run by ctest with -D STRATA=... -D TRACE=...
# -D OUT=... -D SOURCE=...; the screenshot stays in OUT as an artifact.
find_program(CHROMIUM NAMES chromium chromium-browser)
if(NOT CHROMIUM)
  message("SKIP: chromium is not installed (scripts/install-deps installs it)")
  return()
endif()
file(MAKE_DIRECTORY ${OUT})
execute_process(COMMAND ${STRATA} replay ${TRACE} --quiet --html ${OUT}/replay_report.html
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "strata replay failed: ${rc}")
endif()
execute_process(
  COMMAND ${CHROMIUM} --headless --no-sandbox --disable-gpu --hide-scrollbars
          --window-size=1100,1400 --screenshot=${OUT}/replay_report.png
          file://${OUT}/replay_report.html
  RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET TIMEOUT 120)
if(NOT rc EQUAL 0 OR NOT EXISTS ${OUT}/replay_report.png)
  message(FATAL_ERROR "chromium could not render the report: ${rc}")
endif()
execute_process(COMMAND python3 ${SOURCE}/check_screenshot.py ${OUT}/replay_report.png
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the report's screenshot is blank")
endif()
message("screenshot kept at ${OUT}/replay_report.png")
