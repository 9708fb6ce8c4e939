from django.urls import include, path
from orders import views

urlpatterns = [
    path("orders/", views.place_order, name="place-order"),
    path("orders/<int:order_id>/", views.order_status, name="order-status"),
    path("awa/", include("awa.contrib.django.urls")),  # read-only queue page for staff
]
