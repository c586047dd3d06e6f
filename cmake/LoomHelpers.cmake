# loom_test(NAME SOURCES... LIBS lib...): one gtest binary per component,
# registered with CTest. Tests run from the source root so that they can find
# testdata/ and ../shared/traces.
function(loom_test name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_LIBS} GTest::gtest GTest::gmock
                        GTest::gtest_main)
  # The test sources themselves are built at -O1 with line tables only in the
  # optimised build: they were half of its compile time at -O2 -g (gtest and
  # gmock expand to a lot of code) and run no hot loops of their own. The
  # code under test comes from the libraries, built as configured.
  target_compile_options(${name} PRIVATE $<$<CONFIG:RelWithDebInfo,Release>:-O1 -g1>)
  gtest_discover_tests(${name} WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
                       DISCOVERY_TIMEOUT 60)
endfunction()
